"""The researcher's API: the export tables, behind the admin token (``require_admin``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse

from controversial.study.export_process import ExportFailed, ExportRequest, TableExport
from controversial.study.pnas_export import TABLES
from controversial.study.server.state import NO_STORE, ApiError, ServerDep, require_admin

router = APIRouter()


@router.get("/admin/{name}", dependencies=[Depends(require_admin)])
async def admin_table(
    name: str, server: ServerDep, include_incomplete: Annotated[bool, Query()] = False
) -> StreamingResponse:
    """Stream one export table from a read-only snapshot, built in a child process (export_process.py)
    so that participants' answers never wait for it."""
    if name not in TABLES:
        raise ApiError(404, f"no such export {name!r}; available: {', '.join(TABLES)}")
    request = ExportRequest(
        str(server.bundle.root), server.database_url, name, include_incomplete, server.settings.quality
    )
    try:
        export = await TableExport.start(request)
    except ExportFailed as error:
        raise ApiError(500, f"export failed: {error}") from None
    return StreamingResponse(
        export.chunks(),
        media_type="text/csv",
        headers={**NO_STORE, "Content-Disposition": f'attachment; filename="{name}"'},
    )
