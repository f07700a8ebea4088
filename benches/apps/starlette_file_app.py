"""The starlette-file group's app: Starlette's ``FileResponse`` for the site's files at ``/files/{name}``.

Served unchanged by rush and granian, which list ASGI's ``http.response.pathsend``
extension (Starlette then hands them the path and the server sends the file
itself), and by uvicorn, which does not (Starlette then reads the file and sends
it in chunks). The endpoint is written as Starlette's docs show it.
"""

from starlette.applications import Starlette
from starlette.responses import FileResponse
from starlette.routing import Route

from benches.apps.site import ensure_site

SITE = ensure_site()


async def file(request):
    return FileResponse(SITE / request.path_params["name"], media_type="text/plain")


app = Starlette(routes=[Route("/files/{name}", file)])
