"""URL configuration: the admin and the project's views."""

from django.contrib import admin
from django.urls import path

from . import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("upload/", views.upload),
    path("export.csv", views.some_streaming_csv_view),
    path("whoami/", views.whoami),
]
