"""300 models of ten fields, made and registered in the admin when Django
imports this app's models (see benches/apps/django_heavy.py)."""

from __future__ import annotations

from django.contrib import admin
from django.db import models

MODELS = 300
FIELDS = 10


def _field(index: int) -> models.Field:
    kind = index % 5
    if kind == 0:
        return models.CharField(max_length=100, blank=True)
    if kind == 1:
        return models.IntegerField(default=0)
    if kind == 2:
        return models.DateTimeField(null=True)
    if kind == 3:
        return models.TextField(blank=True)
    return models.DecimalField(max_digits=10, decimal_places=2, default=0)


for number in range(MODELS):
    attributes = {f"field_{index}": _field(index) for index in range(FIELDS)}
    attributes["__module__"] = __name__
    model = type(f"Model{number}", (models.Model,), attributes)
    admin.site.register(model, type(f"Model{number}Admin", (admin.ModelAdmin,), {"list_display": ("id", "field_0")}))
