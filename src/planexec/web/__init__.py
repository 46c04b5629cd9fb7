"""The web console: pages over the run store to follow runs and to review, edit and approve plans.

A face, like the CLI: `create_app` (in `app`) builds the ASGI application
``planexec serve`` runs with uvicorn. `views` reads what the pages show,
`graph` draws the plan and the timeline as SVG on the server, `actions`
holds the two things a person changes (decide an approval, edit a pending
plan) and `security` the guard in front of every request (a token, then
CSRF and Origin checks on anything that changes state). Templates and
static files ship in the package: a page loads nothing from another host.
Needs the ``web`` extra (FastAPI, uvicorn, sse-starlette, Jinja2). Imports
the store, the plan and the engine's records; only the CLI imports it.
"""

from planexec.web.app import create_app
from planexec.web.security import csrf_token, new_token

__all__ = ["create_app", "csrf_token", "new_token"]
