"""Storage behaviour that no route shows directly."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy.exc

from headway.storage import queries


async def test_database_errors_never_show_statement_parameters(app):
    """Parameters hold space uuids, which are credentials: an error message (and so a log
    line) must not carry them."""
    db = app.state.service.db
    space = str(uuid.uuid4())
    async with db.write() as conn:
        await queries.insert_space(conn, space, None, None, 0)
    with pytest.raises(sqlalchemy.exc.IntegrityError) as failure:
        async with db.write() as conn:
            await queries.insert_space(conn, space, None, None, 0)
    assert space not in str(failure.value)
