#include "cellgate/launcher/service.hpp"

#include <gtest/gtest.h>

#include <csignal>

using namespace cellgate::launcher;
using service::bad_request;
using service::op;
using service::parse_request;

TEST(service_protocol, every_request_round_trips) {
    service::request r;
    r.op = op::create;
    r.spec.id = "abc-1";
    r.spec.limits.memory_bytes = 1u << 30;
    r.spec.env = {{"KERNEL_X", "1"}};
    auto back = parse_request(service::to_json(r).dump());
    EXPECT_EQ(back.op, op::create);
    EXPECT_EQ(back.spec.id, "abc-1");
    EXPECT_EQ(back.spec.limits.memory_bytes, 1u << 30);
    EXPECT_EQ(back.spec.env.at("KERNEL_X"), "1");

    r = {};
    r.op = op::signal;
    r.id = "k1";
    r.signal = SIGINT;
    back = parse_request(service::to_json(r).dump());
    EXPECT_EQ(back.signal, SIGINT);
    EXPECT_EQ(back.id, "k1");

    r = {};
    r.op = op::reap;
    r.keep = {"a", "b"};
    r.unused_workspaces = true;
    back = parse_request(service::to_json(r).dump());
    EXPECT_EQ(back.keep, (std::set<std::string>{"a", "b"}));
    EXPECT_TRUE(back.unused_workspaces);

    r = {};
    r.op = op::remove;
    r.id = "z";
    r.keep_workspace = true;
    back = parse_request(service::to_json(r).dump());
    EXPECT_TRUE(back.keep_workspace);

    for (const auto o : {op::checkpoint, op::restore}) {
        r = {};
        r.op = o;
        r.id = "paused-1";
        back = parse_request(service::to_json(r).dump());
        EXPECT_EQ(back.op, o);
        EXPECT_EQ(back.id, "paused-1");
    }

    r = {};
    r.op = op::snapshot;
    r.id = "source-1";
    r.snapshot = "snap-1";
    back = parse_request(service::to_json(r).dump());
    EXPECT_EQ(back.op, op::snapshot);
    EXPECT_EQ(back.id, "source-1");
    EXPECT_EQ(back.snapshot, "snap-1");
    r = {};
    r.op = op::remove_snapshot;
    r.snapshot = "snap-1";
    back = parse_request(service::to_json(r).dump());
    EXPECT_EQ(back.op, op::remove_snapshot);
    EXPECT_EQ(back.snapshot, "snap-1");

    r = {};
    r.op = op::create_volume;
    r.volume = "vol-1";
    r.bytes = 64u << 20;
    back = parse_request(service::to_json(r).dump());
    EXPECT_EQ(back.op, op::create_volume);
    EXPECT_EQ(back.volume, "vol-1");
    EXPECT_EQ(back.bytes, 64u << 20);
    for (const auto o : {op::volume_usage, op::remove_volume}) {
        r = {};
        r.op = o;
        r.volume = "vol-1";
        back = parse_request(service::to_json(r).dump());
        EXPECT_EQ(back.op, o);
        EXPECT_EQ(back.volume, "vol-1");
    }
}

TEST(service_protocol, anything_outside_the_schema_is_refused) {
    const char* bad[] = {
        "", "[]", "42", "{}", R"({"op": 1})", R"({"op": "exec"})", R"({"op": "list", "x": 1})",
        R"({"op": "status"})", R"({"op": "status", "id": ""})", R"({"op": "status", "id": "../x"})",
        R"({"op": "status", "id": "a/b"})", R"({"op": "status", "id": 7})",
        R"({"op": "signal", "id": "a", "signal": "SIGSTOP"})", R"({"op": "signal", "id": "a", "signal": 9})",
        R"({"op": "remove", "id": "a", "keep_workspace": "yes"})", R"({"op": "set_cpu_shares", "id": "a"})",
        R"({"op": "set_cpu_shares", "id": "a", "shares": -5})", R"({"op": "set_cpu_shares", "id": "a", "shares": 1e9})",
        R"({"op": "reap", "keep": "a"})", R"({"op": "reap", "keep": ["a/../b"]})", R"({"op": "create"})",
        R"({"op": "create", "spec": []})",
        // checkpoint and restore take a sandbox id and nothing else: never a path.
        R"({"op": "checkpoint"})", R"({"op": "checkpoint", "id": "../etc"})",
        R"({"op": "checkpoint", "id": "a", "image_path": "/tmp/x"})", R"({"op": "restore", "id": "a", "spec": {}})",
        R"({"op": "restore", "id": ""})",
        // A snapshot is named like an id: never a path, and the source is a sandbox id.
        R"({"op": "snapshot", "id": "a"})", R"({"op": "snapshot", "id": "a", "snapshot": "../../etc"})",
        R"({"op": "snapshot", "id": "a/b", "snapshot": "s"})", R"({"op": "snapshot", "id": "a", "snapshot": "s", "to": "/x"})",
        R"({"op": "remove_snapshot"})", R"({"op": "remove_snapshot", "snapshot": "/var"})",
        R"({"op": "remove_snapshot", "snapshot": "s", "id": "a"})",
        // Volumes: an id, never a path; a size as a whole number.
        R"({"op": "create_volume", "volume": "v"})", R"({"op": "create_volume", "volume": "../v", "bytes": 1})",
        R"({"op": "create_volume", "volume": "v", "bytes": -1})", R"({"op": "create_volume", "volume": "v", "bytes": "1G"})",
        R"({"op": "volume_usage", "volume": "/var/lib"})", R"({"op": "remove_volume"})",
        R"({"op": "remove_volume", "volume": "v", "path": "/"})",
    };
    for (const char* line : bad) EXPECT_THROW(parse_request(line), bad_request) << line;
}

TEST(service_protocol, specs_go_through_the_launchers_strict_parser) {
    EXPECT_THROW(parse_request(R"({"op": "create", "spec": {"mounts": []}})"), spec_error);
    EXPECT_THROW(parse_request(R"({"op": "create", "spec": {"uid": -1}})"), spec_error);
    EXPECT_THROW(parse_request(R"({"op": "create", "spec": {"image": "/"}})"), spec_error);
    EXPECT_THROW(parse_request(R"({"op": "create", "spec": {"from_snapshot": 7}})"), spec_error);
    EXPECT_THROW(parse_request(R"({"op": "create", "spec": {"volumes": [{"volume": "v", "source": "/"}]}})"), spec_error);
    EXPECT_THROW(parse_request(R"({"op": "create", "spec": {"volumes": [{"volume": "v", "read_only": 1}]}})"), spec_error);
    EXPECT_THROW(parse_request(R"({"op": "create", "spec": {"volumes": {}}})"), spec_error);
    EXPECT_THROW(parse_request(R"({"op": "validate", "spec": {"image": "/usr"}})"), spec_error);
    EXPECT_NO_THROW(parse_request(R"({"op": "create", "spec": {"image": "python"}})"));
}

TEST(service_protocol, a_status_with_its_key_survives_the_trip) {
    sandbox_status s;
    s.id = "k";
    s.state = sandbox_state::running;
    s.pid = 42;
    s.oom_killed = true;
    sandbox_info info;
    info.id = "k";
    info.pid = 42;
    info.endpoints.key = "secret";
    info.endpoints.shell = "ipc:///run/x/shell";
    s.info = info;
    const auto back = service::status_from_json(service::status_to_json(s));
    EXPECT_EQ(back.state, sandbox_state::running);
    EXPECT_TRUE(back.oom_killed);
    ASSERT_TRUE(back.info.has_value());
    EXPECT_EQ(back.info->endpoints.key, "secret");
    EXPECT_EQ(back.info->endpoints.shell, "ipc:///run/x/shell");
}

TEST(service_protocol, an_exec_request_round_trips) {
    service::request r;
    r.op = op::exec;
    r.id = "k1";
    r.process.argv = {"sh", "-c", "stty size"};
    r.process.cwd = "/tmp";
    r.process.env = {{"LD_PRELOAD", "a client's own business"}};
    r.process.tty = true;
    r.process.rows = 30;
    r.process.cols = 100;
    const auto back = parse_request(service::to_json(r).dump());
    EXPECT_EQ(back.op, op::exec);
    EXPECT_EQ(back.id, "k1");
    EXPECT_EQ(back.process.argv, r.process.argv);
    EXPECT_EQ(back.process.cwd, "/tmp");
    EXPECT_EQ(back.process.env, r.process.env);
    EXPECT_TRUE(back.process.tty);
    EXPECT_EQ(back.process.rows, 30);
    EXPECT_EQ(back.process.cols, 100);
    EXPECT_FALSE(back.process.stdin_);
    const auto minimal = parse_request(R"({"op":"exec","id":"k1","process":{"argv":["true"]}})");
    EXPECT_EQ(minimal.process.cwd, "/workspace");
}

TEST(service_protocol, an_exec_request_outside_the_schema_is_refused) {
    const char* bad[] = {
        R"({"op":"exec","cmd":"id"})",
        R"({"op":"exec","id":"k1"})",
        R"({"op":"exec","id":"k1","process":["id"]})",
        R"({"op":"exec","id":"../x","process":{"argv":["id"]}})",
        R"({"op":"exec","id":"k1","process":{"argv":["id"]},"spec":{}})",
        R"({"op":"exec","id":"k1","process":{"argv":["id"]},"signal":"SIGKILL"})",
    };
    for (const char* line : bad) EXPECT_THROW(parse_request(line), bad_request) << line;
    // The process itself goes through the launcher's strict parser and validation.
    const char* bad_process[] = {
        R"({"op":"exec","id":"k1","process":{}})",
        R"({"op":"exec","id":"k1","process":{"argv":[]}})",
        R"({"op":"exec","id":"k1","process":{"argv":["id"],"user":"root"}})",
        R"({"op":"exec","id":"k1","process":{"argv":["id"],"uid":0}})",
        R"({"op":"exec","id":"k1","process":{"argv":["id"],"cwd":"../etc"}})",
        R"({"op":"exec","id":"k1","process":{"argv":["id"],"cwd":"/workspace/../../etc"}})",
        R"({"op":"exec","id":"k1","process":{"argv":["id"],"env":{"CELLGATE_PRELOAD":"x"}}})",
        R"({"op":"exec","id":"k1","process":{"argv":["id"],"env":{"A=B":"x"}}})",
        R"({"op":"exec","id":"k1","process":{"argv":["id"],"tty":true,"rows":0}})",
        R"({"op":"exec","id":"k1","process":{"argv":["id"],"stdin":"yes"}})",
        R"({"op":"exec","id":"k1","process":{"argv":["a\u0000b"]}})",
    };
    for (const char* line : bad_process) EXPECT_THROW(parse_request(line), spec_error) << line;
}
