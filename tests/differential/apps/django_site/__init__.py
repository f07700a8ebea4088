"""A small Django project as ``django-admin startproject`` lays one out (settings, urls, wsgi,
asgi), with the admin, a file upload, a ``StreamingHttpResponse`` and a Channels consumer
(``routing.py``). Its SQLite database is named by ``DIFF_DJANGO_DB`` (the test migrates it)."""
