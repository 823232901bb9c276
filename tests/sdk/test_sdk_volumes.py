"""The Python SDK's named volumes end to end against the real gateway's /v1
API: create_volume/list_volumes/get_volume/delete_volume, Sandbox(volumes=…),
SessionInfo.volumes, one writer at a time, and the errors. The gateway runs
the default runtime (runc)."""
import datetime

import pytest

import sdk_support  # noqa: F401  (puts the SDK on sys.path)
from cellgate import (CellgateError, NotFound, Sandbox, SnapshotNotFound, Volume, VolumeMount, VolumeNotFound,
                      create_volume, delete_volume, get_volume, list_volumes)

MIB = 1 << 20


@pytest.fixture(autouse=True)
def no_volumes_left(gateway):
    """Each test starts and ends without volumes (they outlive sessions)."""
    def delete_all():
        for vol in list_volumes(gateway.url, gateway.token):
            delete_volume(vol, gateway.url, gateway.token)
    delete_all()
    yield
    delete_all()


def sandbox(gateway, **kw):
    return Sandbox(gateway.url, gateway.token, timeout=60, **kw)


def run_ok(sb, code):
    ex = sb.run_code(code)
    assert ex.status == "ok", (ex.status, ex.error, ex.logs.stderr)
    return ex


def test_volume_model_get_list_and_create_errors(gateway):
    before = datetime.datetime.now(datetime.timezone.utc)
    vol = create_volume("data-1", size_bytes=16 * MIB, url=gateway.url, token=gateway.token)
    assert isinstance(vol, Volume)
    assert vol.name == "data-1" and vol.size_bytes == 16 * MIB and vol.mounts == [], vol.raw
    assert isinstance(vol.used_bytes, int) and 0 <= vol.used_bytes < 16 * MIB, vol.raw
    created = datetime.datetime.fromisoformat(vol.created.replace("Z", "+00:00"))
    assert abs((created - before).total_seconds()) < 120, vol.created
    assert {"name", "size_bytes", "used_bytes", "created", "mounts"} <= set(vol.raw), vol.raw

    default = create_volume("data_2", url=gateway.url, token=gateway.token)
    assert default.size_bytes == 1 << 30, default.raw

    assert get_volume("data-1", gateway.url, gateway.token).raw == vol.raw
    assert get_volume(vol, gateway.url, gateway.token).name == "data-1"
    assert sorted(v.name for v in list_volumes(gateway.url, gateway.token)) == ["data-1", "data_2"]

    with pytest.raises(CellgateError) as dup:
        create_volume("data-1", url=gateway.url, token=gateway.token)
    assert dup.value.status == 409 and not isinstance(dup.value, NotFound), dup.value
    for bad in ({"name": "no/slash"}, {"name": "x" * 65}, {"name": "small", "size_bytes": MIB}):
        with pytest.raises(CellgateError) as e:
            create_volume(url=gateway.url, token=gateway.token, **bad)
        assert e.value.status == 400, (bad, e.value)
    assert sorted(v.name for v in list_volumes(gateway.url, gateway.token)) == ["data-1", "data_2"]


def test_files_outlive_the_session_that_wrote_them(gateway):
    create_volume("shared", size_bytes=16 * MIB, url=gateway.url, token=gateway.token)
    with sandbox(gateway, volumes=[VolumeMount("shared")]) as writer:
        assert writer.info().volumes == [{"name": "shared", "path": "/volumes/shared", "read_only": False}]
        run_ok(writer, "open('/volumes/shared/x.txt', 'w').write('kept across sessions')")
        mounts = get_volume("shared", gateway.url, gateway.token).mounts
        assert mounts == [{"session": writer.id, "path": "/volumes/shared", "read_only": False}], mounts
    assert get_volume("shared", gateway.url, gateway.token).mounts == []

    # A dict with its own path works too; the file is there in the next session.
    with sandbox(gateway, volumes=[{"name": "shared", "path": "/volumes/in"}]) as reader:
        assert reader.info().volumes == [{"name": "shared", "path": "/volumes/in", "read_only": False}]
        ex = run_ok(reader, "print(open('/volumes/in/x.txt').read())")
        assert ex.logs.stdout == "kept across sessions\n", ex.logs.stdout
        listed = {s.id: s for s in Sandbox.list(gateway.url, gateway.token)}
        assert listed[reader.id].volumes == reader.info().volumes
    assert get_volume("shared", gateway.url, gateway.token).used_bytes > 0


def test_one_writer_and_read_only_readers(gateway):
    create_volume("v", size_bytes=16 * MIB, url=gateway.url, token=gateway.token)
    with sandbox(gateway, volumes=["v"]) as writer:
        run_ok(writer, "open('/volumes/v/w.txt', 'w').write('from the writer')")

        # A second read-write mount is refused, with the gateway's reason.
        with pytest.raises(CellgateError) as busy:
            sandbox(gateway, volumes=[VolumeMount("v")])
        assert busy.value.status == 409 and not isinstance(busy.value, NotFound), busy.value
        assert "one writer" in busy.value.message, busy.value.message

        # Read-only readers beside the writer see its files and cannot write.
        with sandbox(gateway, volumes=[VolumeMount("v", read_only=True)]) as r1, \
                sandbox(gateway, volumes=[{"name": "v", "read_only": True, "path": "/volumes/ro"}]) as r2:
            assert r1.info().volumes == [{"name": "v", "path": "/volumes/v", "read_only": True}]
            ex = run_ok(r1, "print(open('/volumes/v/w.txt').read())")
            assert ex.logs.stdout == "from the writer\n"
            for sb, path in ((r1, "/volumes/v"), (r2, "/volumes/ro")):
                ex = sb.run_code(f"open('{path}/r.txt', 'w').write('no')")
                assert ex.status == "error" and ex.error is not None, (ex.status, ex.logs.stdout)
                assert ex.error.name in ("OSError", "PermissionError"), ex.error
                assert "Read-only file system" in ex.error.value or "Permission denied" in ex.error.value, ex.error
            mounts = get_volume("v", gateway.url, gateway.token).mounts
            assert sorted((m["session"], m["read_only"]) for m in mounts) == \
                sorted([(writer.id, False), (r1.id, True), (r2.id, True)]), mounts
        ex = run_ok(writer, "import os; print(os.path.exists('/volumes/v/r.txt'))")
        assert ex.logs.stdout == "False\n"

    # With the writer gone, a new writer is admitted.
    with sandbox(gateway, volumes=[{"name": "v"}]) as again:
        run_ok(again, "open('/volumes/v/w.txt', 'a').write(' again')")


def test_delete_while_mounted_then_after_close(gateway):
    create_volume("busy", size_bytes=16 * MIB, url=gateway.url, token=gateway.token)
    with sandbox(gateway, volumes=[VolumeMount("busy", read_only=True)]):
        with pytest.raises(CellgateError) as e:
            delete_volume("busy", gateway.url, gateway.token)
        assert e.value.status == 409 and not isinstance(e.value, NotFound), e.value
        assert [v.name for v in list_volumes(gateway.url, gateway.token)] == ["busy"]
    delete_volume("busy", gateway.url, gateway.token)
    assert list_volumes(gateway.url, gateway.token) == []
    with pytest.raises(VolumeNotFound):
        get_volume("busy", gateway.url, gateway.token)


def test_unknown_volume(gateway):
    for call in (lambda: get_volume("nope", gateway.url, gateway.token),
                 lambda: delete_volume("nope", gateway.url, gateway.token)):
        with pytest.raises(VolumeNotFound) as e:
            call()
        assert e.value.status == 404, e.value
    before = {s.id for s in Sandbox.list(gateway.url, gateway.token)}
    with pytest.raises(VolumeNotFound) as e:
        sandbox(gateway, volumes=[VolumeMount("nope")])
    assert e.value.status == 404 and not isinstance(e.value, SnapshotNotFound), e.value
    assert "nope" in e.value.message, e.value.message
    assert {s.id for s in Sandbox.list(gateway.url, gateway.token)} == before


def test_bad_mounts_are_refused(gateway):
    create_volume("m", size_bytes=16 * MIB, url=gateway.url, token=gateway.token)
    for volumes in ([{"name": "m", "path": "/workspace/m"}], [{"name": "m", "read_only": "yes"}],
                    [VolumeMount("m"), VolumeMount("m", read_only=True)]):
        with pytest.raises(CellgateError) as e:
            sandbox(gateway, volumes=volumes)
        assert e.value.status == 400, (volumes, e.value)
    with pytest.raises(TypeError):
        sandbox(gateway, volumes=[42])
