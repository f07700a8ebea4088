"""The Django app of benches/apps/django_heavy.py; its models.py makes 300
models of ten fields and registers them in the admin (see that module)."""

from __future__ import annotations

from django.apps import AppConfig


class HeavyConfig(AppConfig):
    name = "benches.apps.django_heavy_models"
    label = "heavy"
