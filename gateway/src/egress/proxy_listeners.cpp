// The listener registry: the sessions the proxy serves, each with its unix
// socket, its acceptor and the rules new connections get (attach, set_rules,
// detach, stop), and the accept loop that admits a connection within the
// session's accept rate and the per-session and total limits, or refuses it
// (429 past the rate, 503 as busy). It owns proxy::impl::
// sessions and the open-connection counts.

#include "egress/proxy_internal.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace cellgate::egress {

namespace {

const std::string& rate_limited_reply() {
    static const std::string r = response(429, "Too Many Requests", "cellgate egress: too many connections per second");
    return r;
}

}  // namespace

bool proxy::impl::admit(session_state& s, steady::duration& wait) {
    const double rate = std::max(opt.accept_rate, 0.001);
    const double burst = std::max(2 * rate, 1.0);
    const auto now = steady::now();
    if (s.refilled == steady::time_point{}) s.tokens = burst;
    else s.tokens = std::min(burst, s.tokens + std::chrono::duration<double>(now - s.refilled).count() * rate);
    s.refilled = now;
    if (s.tokens >= 1) {
        s.tokens -= 1;
        return true;
    }
    wait = std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>((1 - s.tokens) / rate));
    return false;
}

void proxy::impl::start_accepting(const std::shared_ptr<session_state>& s) {
    asio::co_spawn(ioc, accept_loop(shared_from_this(), s), asio::detached);
}

awaitable<void> proxy::impl::accept_loop(std::shared_ptr<impl> self, std::shared_ptr<session_state> s) {
    for (;;) {
        auto strand = asio::make_strand(self->ioc);
        boost::system::error_code ec;
        local::socket sock = co_await s->acceptor->async_accept(strand, asio::redirect_error(use_awaitable, ec));
        if (ec) {
            if (ec == asio::error::operation_aborted || s->detached) co_return;
            // Out of descriptors and the like: wait a moment, not spin.
            asio::steady_timer t(self->ioc, std::chrono::milliseconds(100));
            co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
            continue;
        }
        // The accept rate: past it, one quick 429 (no record, a count), then
        // this socket waits until the session may have another.
        steady::duration wait{};
        if (!self->admit(*s, wait)) {
            ++self->stats.rate_limited;
            sock.non_blocking(true, ec);
            sock.send(asio::buffer(rate_limited_reply()), 0, ec);
            sock.close(ec);
            asio::steady_timer t(self->ioc, wait);
            co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
            if (s->detached) co_return;
            continue;
        }
        auto c = std::make_shared<connection>(strand);
        c->session = s->id;
        c->client.emplace(std::move(sock));
        std::shared_ptr<const session_rules> rules;
        bool over = false;
        {
            std::lock_guard lock(self->mutex);
            if (s->detached) co_return;
            over = s->open >= self->opt.max_connections_per_session || self->open_total >= self->opt.max_connections;
            if (!over) {
                ++s->open;
                ++self->open_total;
                s->connections.insert(c);
            }
            rules = s->rules;
        }
        if (over) {
            asio::co_spawn(strand, refuse_busy(self, s, c), asio::detached);
            continue;
        }
        ++self->stats.open;
        asio::co_spawn(strand, serve(self, s, c, rules), asio::detached);
    }
}

awaitable<void> proxy::impl::refuse_busy(std::shared_ptr<impl> self, std::shared_ptr<session_state> s,
                                         std::shared_ptr<connection> c) {
    connection_record rec;
    rec.time_ms = unix_ms();
    rec.reason = "too many connections";
    boost::system::error_code ec;
    co_await asio::async_write(*c->client, asio::buffer(response(503, "Service Unavailable",
                                                                  "cellgate egress: too many open connections")),
                               asio::redirect_error(use_awaitable, ec));
    c->close();
    self->finish(s, std::move(rec), nullptr);
}

void proxy::attach(const std::string& session, const std::filesystem::path& socket, session_rules rules) {
    auto s = std::make_shared<impl::session_state>();
    s->id = session;
    s->socket = socket;
    s->rules = std::make_shared<const session_rules>(std::move(rules));
    ::unlink(socket.c_str());
    s->acceptor.emplace(impl_->ioc);
    s->acceptor->open();
    // A unix socket's path holds 107 bytes, and the session's directory sits
    // as deep as the state dir: bound through a descriptor of the directory,
    // the path is /proc/self/fd/N/proxy.sock however deep it is.
    const int dir = ::open(socket.parent_path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) throw std::system_error(errno, std::generic_category(), "egress: open " + socket.parent_path().string());
    boost::system::error_code bind_error;
    s->acceptor->bind(local::endpoint("/proc/self/fd/" + std::to_string(dir) + "/" + socket.filename().string()),
                      bind_error);
    ::close(dir);
    if (bind_error) throw boost::system::system_error(bind_error, "egress: bind " + socket.string());
    // The sandbox's uid is not ours: anyone who can reach the path may
    // connect (the directory is this session's only, mounted in its sandbox).
    ::chmod(socket.c_str(), 0666);
    s->acceptor->listen(64);
    {
        std::lock_guard lock(impl_->mutex);
        if (const auto it = impl_->sessions.find(session); it != impl_->sessions.end()) {
            s->log = std::move(it->second->log);
            s->next_seq = it->second->next_seq;
            it->second->detached = true;
            boost::system::error_code ec;
            it->second->acceptor->close(ec);
        }
        impl_->sessions[session] = s;
    }
    impl_->start_accepting(s);
}

bool proxy::set_rules(const std::string& session, session_rules rules) {
    std::lock_guard lock(impl_->mutex);
    const auto it = impl_->sessions.find(session);
    if (it == impl_->sessions.end()) return false;
    it->second->rules = std::make_shared<const session_rules>(std::move(rules));
    return true;
}

void proxy::detach(const std::string& session) {
    std::shared_ptr<impl::session_state> s;
    {
        std::lock_guard lock(impl_->mutex);
        const auto it = impl_->sessions.find(session);
        if (it == impl_->sessions.end()) return;
        s = it->second;
        impl_->sessions.erase(it);
        s->detached = true;
    }
    asio::post(impl_->ioc, [s] {
        boost::system::error_code ec;
        if (s->acceptor) s->acceptor->close(ec);
    });
    std::set<std::shared_ptr<impl::connection>> conns;
    {
        std::lock_guard lock(impl_->mutex);
        conns = s->connections;
    }
    for (const auto& c : conns) asio::post(c->timer.get_executor(), [c] { c->close(); });
    ::unlink(s->socket.c_str());
}

bool proxy::attached(const std::string& session) const {
    std::lock_guard lock(impl_->mutex);
    return impl_->sessions.count(session) != 0;
}

void proxy::stop() {
    std::vector<std::string> ids;
    {
        std::lock_guard lock(impl_->mutex);
        for (const auto& [id, s] : impl_->sessions) ids.push_back(id);
    }
    for (const auto& id : ids) detach(id);
    impl_->resolver->stop();
}

}  // namespace cellgate::egress
