"""The Python SDK's snapshots and fork end to end against the real gateway's
/v1 API: Sandbox.snapshot()/snapshots()/fork(), Sandbox(from_snapshot=…),
list_snapshots/get_snapshot/delete_snapshot, SessionInfo.origin, and the
errors. The gateway runs the default runtime (runc); a snapshot holds the
workspace's files, not the kernel's memory (mode "files")."""
import datetime

import pytest

import sdk_support  # noqa: F401  (puts the SDK on sys.path)
from cellgate import (CellgateError, ForkResult, NotFound, Sandbox, SessionNotFound, Snapshot, SnapshotNotFound,
                      TooManySessions, TooManySnapshots, delete_snapshot, get_snapshot, list_snapshots)

MODE = "files"
SNAPSHOT_CAP = 16  # the gateway's default per-tenant cap


@pytest.fixture(autouse=True)
def no_snapshots_left(gateway):
    """Each test starts and ends without snapshots (they outlive sessions)."""
    def delete_all():
        for snap in list_snapshots(gateway.url, gateway.token):
            delete_snapshot(snap, gateway.url, gateway.token)
    delete_all()
    yield
    delete_all()


def parse_time(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def sandbox(gateway, **kw):
    return Sandbox(gateway.url, gateway.token, timeout=60, **kw)


def test_snapshot_model_get_and_lists(gateway):
    with sandbox(gateway) as sb:
        sb.upload("data/a.txt", b"x" * 5000)
        before = datetime.datetime.now(datetime.timezone.utc)
        snap = sb.snapshot(name="before the change")
        assert isinstance(snap, Snapshot)
        assert snap.name == "before the change" and snap.session == sb.id, snap.raw
        assert snap.kernel == sb.info().kernel and snap.mode == MODE, snap.raw
        assert isinstance(snap.id, str) and len(snap.id) >= 32 and snap.id != sb.id, snap.raw
        assert isinstance(snap.bytes, int) and snap.bytes >= 5000, snap.raw
        assert isinstance(snap.disk_bytes, int) and isinstance(snap.reflinked, bool), snap.raw
        created = parse_time(snap.created)
        assert abs((created - before).total_seconds()) < 120, snap.created
        assert {"id", "name", "session", "kernel", "created", "mode", "bytes", "disk_bytes",
                "reflinked"} <= set(snap.raw), snap.raw

        # Without a name it is named by its id.
        unnamed = sb.snapshot()
        assert unnamed.name == unnamed.id and unnamed.id != snap.id, unnamed.raw

        assert get_snapshot(snap.id, gateway.url, gateway.token).raw == snap.raw
        assert get_snapshot(snap, gateway.url, gateway.token).raw == snap.raw
        assert [s.id for s in list_snapshots(gateway.url, gateway.token)] == [snap.id, unnamed.id]
        assert [s.id for s in sb.snapshots()] == [snap.id, unnamed.id]

        # Another session's list holds only its own.
        with sandbox(gateway) as other:
            assert other.snapshots() == []
            mine = other.snapshot("other's")
            assert [s.id for s in other.snapshots()] == [mine.id]
            assert [s.id for s in sb.snapshots()] == [snap.id, unnamed.id]

    # The snapshots outlive their session.
    listed = {s.id: s for s in list_snapshots(gateway.url, gateway.token)}
    assert {snap.id, unnamed.id, mine.id} == set(listed)
    assert listed[snap.id].session == sb.id


def test_sessions_from_a_snapshot_see_its_files_and_not_later_changes(gateway):
    with sandbox(gateway) as src:
        assert src.info().origin is None
        src.upload("notes/data.txt", b"version 1")
        ex = src.run_code("secret = 41\nopen('made.txt', 'w').write('by the kernel')")
        assert ex.status == "ok", ex.error
        snap = src.snapshot("v1")

        # Changes after the snapshot stay out of it.
        src.upload("notes/data.txt", b"version 2")
        src.upload("later.txt", b"after the snapshot")
        src.remove("made.txt")

        with Sandbox(gateway.url, gateway.token, from_snapshot=snap, timeout=77) as a, \
                Sandbox(gateway.url, gateway.token, from_snapshot=snap.id) as b:
            assert len({a.id, b.id, src.id}) == 3
            for child in (a, b):
                info = child.info()
                assert info.origin == {"snapshot": snap.id, "source": src.id, "mode": MODE}, info.raw
                assert info.kernel == src.info().kernel
                assert child.download("notes/data.txt") == b"version 1"
                assert child.download("made.txt") == b"by the kernel"
                with pytest.raises(NotFound) as missing:
                    child.download("later.txt")
                assert not isinstance(missing.value, SessionNotFound)
                ex = child.run_code("print(open('notes/data.txt').read())\n'secret' in dir()")
                assert ex.status == "ok", ex.error
                # Files only: the variable went with the source's kernel.
                assert ex.logs.stdout == "version 1\n" and ex.text == "False", (ex.logs.stdout, ex.text)
            # The request's own limits apply on top of the snapshot's.
            assert a.limits["timeout_s"] == 77 and b.limits["timeout_s"] != 77, (a.limits, b.limits)

            # Each child writes its own copy.
            assert a.run_code("open('notes/data.txt', 'w').write('changed by a')").status == "ok"
            assert a.download("notes/data.txt") == b"changed by a"
            assert b.download("notes/data.txt") == b"version 1"
            assert src.download("notes/data.txt") == b"version 2"
            assert get_snapshot(snap, gateway.url, gateway.token).raw == snap.raw

            listed = {s.id: s for s in Sandbox.list(gateway.url, gateway.token)}
            assert listed[a.id].origin == {"snapshot": snap.id, "source": src.id, "mode": MODE}
            assert listed[src.id].origin is None


def test_fork_makes_independent_children(gateway):
    with sandbox(gateway) as parent:
        parent.upload("shared.txt", b"from the parent")
        assert parent.run_code("x = 41").status == "ok"

        result = parent.fork(count=2, name="two ways")
        with result:
            assert isinstance(result, ForkResult)
            snap, kids = result  # unpacks as a pair
            assert snap is result.snapshot and kids is result.sandboxes
            assert isinstance(snap, Snapshot) and snap.name == "two ways", snap.raw
            assert snap.session == parent.id and snap.mode == MODE, snap.raw
            assert [s.id for s in parent.snapshots()] == [snap.id]
            assert len(kids) == 2 and all(isinstance(k, Sandbox) for k in kids)
            ids = {k.id for k in kids}
            assert len(ids) == 2 and parent.id not in ids, ids
            running = {s.id for s in Sandbox.list(gateway.url, gateway.token)}
            assert ids <= running, (ids, running)

            for i, kid in enumerate(kids):
                assert kid.url == parent.url
                assert kid.info().origin == {"snapshot": snap.id, "source": parent.id, "mode": MODE}
                assert kid._info.origin == kid.info().origin  # the fork's own models carry it too
                ex = kid.run_code("print(open('shared.txt').read())\n'x' in dir()")
                assert ex.status == "ok", ex.error
                assert ex.logs.stdout == "from the parent\n" and ex.text == "False", (ex.logs.stdout, ex.text)
                ex = kid.run_code(f"open('shared.txt', 'w').write('child {i}')\n"
                                  f"open('only-{i}.txt', 'w').write('{i}')")
                assert ex.status == "ok", ex.error

            # Each wrote its own copy: not the other's, not the parent's.
            for i, kid in enumerate(kids):
                assert kid.download("shared.txt") == f"child {i}".encode()
                names = {e.name for e in kid.list_files()}
                assert f"only-{i}.txt" in names and f"only-{1 - i}.txt" not in names, names
            assert parent.download("shared.txt") == b"from the parent"
            assert not any(e.name.startswith("only-") for e in parent.list_files())
            # And the parent's later writes do not reach them.
            parent.upload("after.txt", b"later")
            for kid in kids:
                with pytest.raises(NotFound):
                    kid.download("after.txt")
            assert parent.run_code("x + 1").text == "42"  # the parent's kernel is untouched

        # Leaving the with closed the children, not the parent or the snapshot.
        for kid in kids:
            with pytest.raises(SessionNotFound):
                kid.info()
        assert parent.info().id == parent.id
        assert get_snapshot(snap, gateway.url, gateway.token).id == snap.id

        # A fork's snapshot starts sessions like any other.
        with Sandbox(gateway.url, gateway.token, from_snapshot=snap) as again:
            assert again.download("shared.txt") == b"from the parent"

        # One child by default, named by its snapshot's id.
        with parent.fork() as (one, kids):
            assert len(kids) == 1 and one.name == one.id
            assert kids[0].download("shared.txt") == b"from the parent"


def test_bad_fork_count_is_refused_with_the_servers_message(gateway):
    with sandbox(gateway) as sb:
        before = {s.id for s in Sandbox.list(gateway.url, gateway.token)}
        for count in (0, 17, -1, "2"):
            with pytest.raises(CellgateError) as refused:
                sb.fork(count=count)
            e = refused.value
            assert type(e) is CellgateError and e.status == 400, (count, repr(e))
            assert e.message == "'count' must be a whole number from 1 to 16", (count, e.message)
        with pytest.raises(CellgateError) as refused:
            sb.fork(count=1, name="")
        assert refused.value.status == 400 and "'name'" in refused.value.message, refused.value
        with pytest.raises(CellgateError) as refused:
            sb.snapshot(name="n" * 129)
        assert refused.value.status == 400 and "1 to 128" in refused.value.message, refused.value
        # Nothing was made.
        assert {s.id for s in Sandbox.list(gateway.url, gateway.token)} == before
        assert list_snapshots(gateway.url, gateway.token) == []


def test_unknown_and_deleted_snapshots_are_not_found(gateway):
    missing = "00000000-0000-4000-8000-000000000000"
    with pytest.raises(SnapshotNotFound) as e:
        Sandbox(gateway.url, gateway.token, from_snapshot=missing)
    assert isinstance(e.value, NotFound) and not isinstance(e.value, SessionNotFound)
    assert e.value.status == 404 and "No such snapshot" in e.value.message and missing in e.value.message, e.value
    for call in (get_snapshot, delete_snapshot):
        with pytest.raises(SnapshotNotFound) as e:
            call(missing, gateway.url, gateway.token)
        assert e.value.status == 404 and e.value.message == "No such snapshot", e.value

    with sandbox(gateway) as sb:
        sb.upload("kept.txt", b"kept")
        snap = sb.snapshot()
        with Sandbox(gateway.url, gateway.token, from_snapshot=snap) as child:
            assert delete_snapshot(snap, gateway.url, gateway.token) is None
            assert list_snapshots(gateway.url, gateway.token) == [] and sb.snapshots() == []
            for call in (get_snapshot, delete_snapshot):
                with pytest.raises(SnapshotNotFound):
                    call(snap, gateway.url, gateway.token)
            with pytest.raises(SnapshotNotFound):
                Sandbox(gateway.url, gateway.token, from_snapshot=snap)
            # A session started from it keeps its own copy.
            assert child.download("kept.txt") == b"kept"
            assert child.info().origin["snapshot"] == snap.id


def test_from_snapshot_refuses_kernel_env_and_network(gateway):
    with sandbox(gateway) as sb:
        snap = sb.snapshot()
        before = {s.id for s in Sandbox.list(gateway.url, gateway.token)}
        for kw in ({"kernel": sb.info().kernel}, {"env": {"KERNEL_X": "1"}}, {"network": {"allow": []}}):
            with pytest.raises(CellgateError) as refused:
                Sandbox(gateway.url, gateway.token, from_snapshot=snap, **kw)
            e = refused.value
            assert type(e) is CellgateError and e.status == 400, (kw, repr(e))
            name = next(iter(kw))
            assert f"'{name}' cannot be given with 'from_snapshot'" in e.message, e.message
        assert {s.id for s in Sandbox.list(gateway.url, gateway.token)} == before


def test_snapshot_and_fork_of_a_closed_session(gateway):
    sb = sandbox(gateway)
    sb.close()
    for call in (sb.snapshot, sb.fork, sb.snapshots):
        with pytest.raises(SessionNotFound) as e:
            call()
        assert e.value.status == 404
    assert list_snapshots(gateway.url, gateway.token) == []


def test_past_the_snapshot_cap_is_too_many_snapshots(gateway):
    with sandbox(gateway) as sb:
        sb.upload("f.txt", b"f")
        taken = [sb.snapshot(f"s{i}") for i in range(SNAPSHOT_CAP)]
        assert len({s.id for s in taken}) == SNAPSHOT_CAP
        with pytest.raises(TooManySnapshots) as e:
            sb.snapshot("one too many")
        assert not isinstance(e.value, TooManySessions)
        assert e.value.status == 429 and "Snapshot limit reached" in e.value.message, e.value
        # A fork needs a snapshot too: refused, nothing started.
        before = {s.id for s in Sandbox.list(gateway.url, gateway.token)}
        with pytest.raises(CellgateError) as e:
            sb.fork()
        assert e.value.status == 429, e.value
        assert {s.id for s in Sandbox.list(gateway.url, gateway.token)} == before
        # Deleting one makes room.
        delete_snapshot(taken[0], gateway.url, gateway.token)
        assert sb.snapshot("fits again").name == "fits again"
        assert len(list_snapshots(gateway.url, gateway.token)) == SNAPSHOT_CAP
