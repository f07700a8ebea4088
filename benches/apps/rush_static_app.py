"""The static group's rush app: the site directory mounted at ``/static``, nothing else.

The same as ``rush --static /static=benches/.site`` (an app-less mount), kept
as a module so the command line reads like every other server's. Memory cache
(rush's default): the 1 MiB file is exactly at the default per-file limit,
which is inclusive, so both files are served from memory.
"""

from rush import App

from benches.apps.site import ensure_site

app = App()
app.static("/static", ensure_site(), cache="memory")
