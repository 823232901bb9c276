// Jupyter's terminals API, so JupyterLab's terminal (TerminalManager in
// @jupyterlab/services) opens a shell inside a session's sandbox:
//   GET/POST /api/terminals, GET/DELETE /api/terminals/{name},
//   WebSocket /terminals/websocket/{name} in terminado's JSON arrays:
//   client ["stdin", text] / ["set_size", rows, cols, …]; server ["setup", {}]
//   first, then ["stdout", text], and ["disconnect", 1] when the shell ends.
// A terminal is a process of the process table (bash -l on a PTY, a launcher
// exec with the kernel's confinement), in the sandbox of the kernel the POST
// names ("kernel_id", our extension) or else the caller's most recently active
// kernel: Jupyter's terminals belong to the server, cellgate's to a sandbox.
// Names are per tenant; a terminal ends with its shell, its DELETE, or its
// session.
//
// On a cluster node (issue 16, Part 2) a terminal's name starts with the
// node's tag ("<tag>-1", or "<tag>-<the caller's name>"), so the router and
// the internal hop (http/hop.hpp) bring /api/terminals/<name> and its
// WebSocket to the node whose sandbox runs it; the list spans the cluster;
// and a POST that lands on a node other than the kernel's goes on to that
// node (the kernel it names, or the caller's most recently active one across
// the cluster).
#include "jupyter/jupyter_api.hpp"
#include "jupyter/terminado.hpp"
#include "kit/request_models.hpp"

#include "contents/contents_store.hpp"
#include "processes/process_table.hpp"
#include "util/api_error.hpp"
#include "util/encoding.hpp"
#include "http/hop.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <map>
#include <optional>
#include <set>

namespace cellgate::jupyter {

using namespace kit;

using namespace http;
using nlohmann::json;
using processes::process_ptr;

namespace {

constexpr std::size_t max_terminals_per_tenant = 64;
constexpr std::size_t max_name_bytes = 64;
constexpr std::size_t max_clients_per_terminal = 8;  // WebSockets on one terminal at once

struct terminal {
    std::string name, tenant, kernel_id;
    process_ptr process;
    std::atomic<std::size_t> clients{0};
    mutable std::mutex mutex;
    std::chrono::system_clock::time_point last_activity = std::chrono::system_clock::now();

    void touch() {
        std::lock_guard lock(mutex);
        last_activity = std::chrono::system_clock::now();
    }
    json model() const {
        std::lock_guard lock(mutex);
        return {{"name", name}, {"last_activity", kernels::iso8601(last_activity)}, {"kernel_id", kernel_id}};
    }
};
using terminal_ptr = std::shared_ptr<terminal>;

class terminal_book : public std::enable_shared_from_this<terminal_book> {
public:
    // A name for a new terminal: the caller's, or the lowest free number,
    // after `prefix` (a cluster node's "<tag>-", unless the caller's name
    // has it already). Throws 409 when it is taken, 429 at the tenant's bound.
    std::string reserve(const std::string& tenant, std::string name, const std::string& prefix) {
        std::lock_guard lock(mutex_);
        auto& mine = terminals_[tenant];
        if (mine.size() + reserved_[tenant].size() >= max_terminals_per_tenant)
            throw api_exception(429, "You have " + std::to_string(max_terminals_per_tenant) + " terminals already; close one first");
        auto taken = [&](const std::string& n) { return mine.count(n) != 0 || reserved_[tenant].count(n) != 0; };
        if (!name.empty() && !name.starts_with(prefix)) name = prefix + name;
        if (name.empty()) {
            for (unsigned i = 1; name.empty(); ++i)
                if (!taken(prefix + std::to_string(i))) name = prefix + std::to_string(i);
        } else if (taken(name)) {
            throw api_exception(409, "A terminal named '" + name + "' exists already");
        }
        reserved_[tenant].insert(name);
        return name;
    }
    void unreserve(const std::string& tenant, const std::string& name) {
        std::lock_guard lock(mutex_);
        reserved_[tenant].erase(name);
    }
    void put(const terminal_ptr& t) {
        std::lock_guard lock(mutex_);
        reserved_[t->tenant].erase(t->name);
        terminals_[t->tenant][t->name] = t;
    }
    terminal_ptr find(const std::string& tenant, const std::string& name) const {
        std::lock_guard lock(mutex_);
        const auto it = terminals_.find(tenant);
        if (it == terminals_.end()) return nullptr;
        const auto t = it->second.find(name);
        return t == it->second.end() ? nullptr : t->second;
    }
    std::vector<terminal_ptr> list(const std::string& tenant) const {
        std::lock_guard lock(mutex_);
        std::vector<terminal_ptr> out;
        if (const auto it = terminals_.find(tenant); it != terminals_.end())
            for (const auto& [name, t] : it->second) out.push_back(t);
        return out;
    }
    // Forgets it if it is still this terminal (its shell ended, or DELETE).
    void forget(const terminal_ptr& t) {
        std::lock_guard lock(mutex_);
        const auto it = terminals_.find(t->tenant);
        if (it == terminals_.end()) return;
        if (const auto e = it->second.find(t->name); e != it->second.end() && e->second == t) it->second.erase(e);
    }

private:
    mutable std::mutex mutex_;
    std::map<std::string, std::map<std::string, terminal_ptr>> terminals_;  // tenant → name →
    std::map<std::string, std::set<std::string>> reserved_;                 // starting
};

// The book's watcher of a terminal's shell: the terminal goes when it ends.
class reaper : public processes::watcher {
public:
    reaper(std::weak_ptr<terminal_book> book, terminal_ptr t) : book_(std::move(book)), t_(std::move(t)) {}
    void output(processes::stream, const std::string&) override {}
    void exited(const processes::process_exit&) override {
        if (auto b = book_.lock()) b->forget(t_);
        t_.reset();
    }

private:
    std::weak_ptr<terminal_book> book_;
    terminal_ptr t_;
};

// One WebSocket client of a terminal: terminado's messages both ways.
class terminal_client : public socket_peer, public processes::watcher, public std::enable_shared_from_this<terminal_client> {
public:
    terminal_client(terminal_ptr t, kernels::kernel_ptr k, std::shared_ptr<socket_link> link, std::shared_ptr<void> counted)
        : t_(std::move(t)), kernel_(std::move(k)), link_(std::move(link)), counted_(std::move(counted)) {}

    void start() {
        link_->send(R"(["setup",{}])");
        watch_ = t_->process->subscribe(shared_from_this());  // the backlog first, then what comes
    }

    // The shell's output (on the process's strand), as text: a UTF-8
    // sequence cut by a read waits for its next bytes.
    void output(processes::stream, const std::string& bytes) override {
        pending_ += bytes;
        const auto n = utf8_complete_length(pending_);
        if (n == 0) return;
        link_->send(json::array({"stdout", pending_.substr(0, n)}).dump(-1, ' ', false, json::error_handler_t::replace));
        pending_.erase(0, n);
        t_->touch();
    }
    void exited(const processes::process_exit&) override {
        link_->send(R"(["disconnect",1])");
        link_->close("the terminal's shell ended");
    }

    void received(std::string text) override {
        const auto m = read_terminado(text);  // terminado ignores what it cannot read too
        if (!m) return;
        if (m->what == terminado_message::kind::stdin_) {
            std::string why;
            if (!t_->process->write_stdin(m->text, why)) spdlog::debug("terminal {}: input refused: {}", t_->name, why);
            t_->touch();
            kernel_->touch();  // typing in a terminal is using the session
        } else {
            t_->process->resize(m->rows, m->cols);
        }
    }
    void closed() override {
        if (watch_) t_->process->unsubscribe(watch_);  // which lets go of this client (and its link)
    }

private:
    terminal_ptr t_;
    kernels::kernel_ptr kernel_;
    std::shared_ptr<socket_link> link_;
    std::shared_ptr<void> counted_;  // this client, in its terminal's count
    std::uint64_t watch_ = 0;
    std::string pending_;
};

// The kernel a new terminal runs beside: the one named, or the caller's most
// recently active.
kernels::kernel_ptr terminal_kernel(services& s, const request_ptr& req, const json& body) {
    const auto named = string_field(body, "kernel_id");
    if (!named.empty()) return kernel_or_404(s, req, named);
    kernels::kernel_ptr best;
    for (const auto& k : s.kernels.list(req->who.tenant))
        if (k->state() != kernels::kernel_state::dead && (!best || k->last_activity_time() > best->last_activity_time())) best = k;
    if (!best)
        throw api_exception(409, "A terminal runs inside a session's sandbox, and you have no running kernel: start one "
                                 "(open a notebook), or name one with \"kernel_id\"");
    return best;
}

// A cluster node's tag in a kernel id ("" when it has none).
std::string tag_of_id(const std::string& id) { return id.size() > 9 && id[8] == '-' ? id.substr(0, 8) : std::string(); }

// The POST, as it came but with "kernel_id" set, to the peer at `address`
// (host:port), signed for the caller (never its token) and with
// X-Cellgate-Hop (so it is never passed on again); its answer is the reply. Blocking: file-work threads only.
void create_on_peer(services& s, const request_ptr& req, json body, const std::string& kernel_id,
                    const std::string& address, const reply_fn& reply) {
    body["kernel_id"] = kernel_id;
    reply_from_peer(s, req, tag_of_id(kernel_id), address, "/api/terminals", body.dump(), std::chrono::seconds(30),
                    "The terminal belongs beside kernel " + kernel_id + ", on node " + tag_of_id(kernel_id), reply);
}

// Where, in the cluster, the caller's most recently active kernel runs: its
// id and its node's address ("" for this node), or nothing when the caller
// has none anywhere. Asks each live peer that holds some of the caller's
// kernels (the cluster's index) for them (blocking).
std::optional<std::pair<std::string, std::string>> most_recent_in_cluster(services& s, const request_ptr& req) {
    std::optional<std::pair<std::string, std::string>> best;
    std::string best_time;
    for (const auto& k : s.kernels.list(req->who.tenant))
        if (k->state() != kernels::kernel_state::dead && kernels::iso8601(k->last_activity_time()) > best_time) {
            best_time = kernels::iso8601(k->last_activity_time());
            best = std::pair{k->id(), std::string()};
        }
    const auto peers = holding_peers(s, req, "A terminal goes beside your most recently active kernel, which may be "
                                             "on any node; finding it needs etcd (name the kernel with "
                                             "\"kernel_id\" instead)");
    std::map<std::string, std::string> address_of(peers.begin(), peers.end());
    for (const auto& [tag, kernels] : ask_peers(s, req, peers, "/api/kernels").parts)
        for (const auto& m : kernels) {
            const auto id = m.value("id", std::string());
            const auto when = m.value("last_activity", std::string());
            if (tag_of_id(id) == tag && m.value("execution_state", std::string()) != "dead" && when > best_time) {
                best_time = when;
                best = std::pair{id, address_of[tag]};
            }
        }
    return best;
}

void create_here(services& s, processes::process_table& table, const std::shared_ptr<terminal_book>& book,
                 const request_ptr& req, const json& body, const reply_fn& reply);

void create(services& s, processes::process_table& table, const std::shared_ptr<terminal_book>& book,
            const request_ptr& req, reply_fn reply) {
    auto body = req->json_body(true);
    if (body.is_null()) body = json::object();
    if (!body.is_object()) throw api_exception(400, "The body must be a JSON object");
    const auto name = string_field(body, "name");
    if (name.size() > max_name_bytes || name.find('/') != std::string::npos || has_control_bytes(name) || !is_valid_utf8(name))
        throw api_exception(400, "'name' must be at most 64 bytes of text without '/'");
    const auto named = string_field(body, "kernel_id");
    const bool clustered = s.cluster_peers && !s.node_tag.empty() && http::header_value(req->req, "x-cellgate-hop").empty();
    if (!clustered || (!named.empty() && tag_of_id(named) == s.node_tag))
        return create_here(s, table, book, req, body, reply);
    // A cluster node: the kernel may be another node's; finding out may block.
    run_file_work(s, req, std::move(reply), [&s, &table, book, req, body, named](const reply_fn& rep) {
        if (!named.empty()) {
            auto peers = s.cluster_peers();
            if (peers)
                for (const auto& [tag, address] : *peers)
                    if (tag == tag_of_id(named)) return create_on_peer(s, req, body, named, address, rep);
            return create_here(s, table, book, req, body, rep);  // no live node has it: 404 here
        }
        const auto where = most_recent_in_cluster(s, req);
        if (where && !where->second.empty()) return create_on_peer(s, req, body, where->first, where->second, rep);
        json here = body;
        if (where) here["kernel_id"] = where->first;
        create_here(s, table, book, req, here, rep);
    });
}

void create_here(services& s, processes::process_table& table, const std::shared_ptr<terminal_book>& book,
                 const request_ptr& req, const json& body, const reply_fn& reply) {
    const auto name = string_field(body, "name");
    std::string cwd = "/home/user";
    if (const auto rel = string_field(body, "cwd"); !rel.empty() && rel != "/") {
        try {
            const auto checked = contents::contents_store::check_path(rel.front() == '/' ? rel.substr(1) : rel);
            if (!checked.empty()) cwd += "/" + checked;
        } catch (const contents::contents_error& e) {
            throw api_exception(400, std::string("'cwd': ") + e.what());
        }
    }
    const auto k = terminal_kernel(s, req, body);
    const auto tenant = req->who.tenant;
    const auto reserved = book->reserve(tenant, name, s.node_tag.empty() ? std::string() : s.node_tag + "-");
    processes::command c;
    c.spec.argv = {"/bin/bash", "-l"};
    c.spec.cwd = cwd;
    c.spec.env = {{"HOME", "/home/user"}, {"USER", "user"}, {"PWD", cwd}, {"TERM", "xterm-256color"}, {"SHELL", "/bin/bash"}};
    c.spec.tty = true;
    c.tag = "terminal:" + reserved;
    k->touch();
    table.start(k, std::move(c), [book, k, tenant, reserved, reply](process_ptr p, unsigned status, std::string why) {
        if (!p) {
            book->unreserve(tenant, reserved);
            return reply(error_response(status, "The terminal did not start: " + why));
        }
        auto t = std::make_shared<terminal>();
        t->name = reserved;
        t->tenant = tenant;
        t->kernel_id = k->id();
        t->process = p;
        book->put(t);
        p->subscribe(std::make_shared<reaper>(book, t));
        spdlog::info("terminal {} of tenant {} started in kernel {}'s sandbox", reserved, tenant, k->id());
        reply(json_response(200, t->model()));
    });
}

terminal_ptr terminal_or_404(terminal_book& book, const request_ptr& req) {
    auto t = book.find(req->who.tenant, req->param("name"));
    if (!t) throw api_exception(404, "No terminal named '" + req->param("name").substr(0, 64) + "'");
    return t;
}

}  // namespace

std::shared_ptr<void> register_terminals_api(router& r, services& s, processes::process_table& table) {
    auto book = std::make_shared<terminal_book>();
    r.add(bhttp::verb::get, "/api/terminals", [&s, book](const request_ptr& req, reply_fn reply) {
        json all = json::array();
        for (const auto& t : book->list(req->who.tenant)) all.push_back(t->model());
        reply_list(s, req, std::move(reply), std::move(all));
    });
    r.add(bhttp::verb::post, "/api/terminals", [&s, &table, book](const request_ptr& req, reply_fn reply) {
        create(s, table, book, req, std::move(reply));
    });
    r.add(bhttp::verb::get, "/api/terminals/{name}", [book](const request_ptr& req, reply_fn reply) {
        reply(json_response(200, terminal_or_404(*book, req)->model()));
    });
    r.add(bhttp::verb::delete_, "/api/terminals/{name}", [book](const request_ptr& req, reply_fn reply) {
        const auto t = terminal_or_404(*book, req);
        book->forget(t);
        t->process->kill();
        reply(empty_response(204));
    });
    r.add_socket("/terminals/websocket/{name}", [book, &s](const request_ptr& req) {
        const auto t = book->find(req->who.tenant, req->param("name"));
        if (!t || !t->process->running())
            return socket_accept{error_response(404, "No terminal named '" + req->param("name").substr(0, 64) + "'"), {}};
        auto k = s.kernels.find(req->who.tenant, t->kernel_id);
        if (!k) return socket_accept{error_response(404, "The terminal's session has ended"), {}};
        // One more client of this terminal, counted until its socket (or a failed upgrade) is gone.
        if (++t->clients > max_clients_per_terminal) {
            --t->clients;
            return socket_accept{error_response(429, "The terminal has " + std::to_string(max_clients_per_terminal) +
                                                         " clients already; close one first"),
                                 {}};
        }
        auto counted = std::shared_ptr<void>(nullptr, [t](void*) { --t->clients; });
        return socket_accept{std::nullopt, [t, k, counted](std::shared_ptr<socket_link> link) -> std::shared_ptr<socket_peer> {
                                 auto client = std::make_shared<terminal_client>(t, k, std::move(link), counted);
                                 client->start();
                                 return client;
                             }};
    });
    return book;
}

}  // namespace cellgate::jupyter
