"""The project's own views: a file upload, a streamed CSV (Django's docs example) and the request
as Django sees it."""

import csv
import hashlib

from django.http import JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt


@csrf_exempt
def upload(request):
    document = request.FILES["document"]
    content = document.read()
    return JsonResponse(
        {
            "name": document.name,
            "size": document.size,
            "sha256": hashlib.sha256(content).hexdigest(),
            "title": request.POST.get("title"),
        }
    )


class Echo:
    """An object that implements just the write method of the file-like interface."""

    def write(self, value):
        return value


def some_streaming_csv_view(request):
    rows = ([f"Row {idx}", str(idx)] for idx in range(2000))
    pseudo_buffer = Echo()
    writer = csv.writer(pseudo_buffer)
    return StreamingHttpResponse(
        (writer.writerow(row) for row in rows),
        content_type="text/csv",
        headers={"Content-Disposition": 'attachment; filename="somefilename.csv"'},
    )


def whoami(request):
    return JsonResponse(
        {
            "method": request.method,
            "path": request.path,
            "full_path": request.get_full_path(),
            "scheme": request.scheme,
            "host": request.get_host(),
            "is_secure": request.is_secure(),
            "remote_addr": request.META.get("REMOTE_ADDR"),
            "query": request.GET.dict(),
            "body": request.body.decode("latin-1"),
            "content_type": request.content_type,
            "headers": {name: value for name, value in request.headers.items() if name.lower().startswith("x-")},
        }
    )
