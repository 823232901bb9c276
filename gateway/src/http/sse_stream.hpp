#pragma once

// A streamed response body (Server-Sent Events): chunks in order from a queue
// only the connection's strand touches, chunked encoding, and a one-byte read
// that watches for the client going away.
//
// Bounded: the bytes written but not yet sent are counted from the moment
// write() is called (a strand that falls behind must not hide a backlog).
// When a client falls more than max_queue_bytes behind, what waits is dropped,
// one last `stream_error` event says why, the stream ends, and the handler's
// disconnect callback runs, as if the client had gone (the agent API
// interrupts the cell). A stream never holds more than the limit plus one chunk.

#include "http/http_types.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/chunk_encode.hpp>

#include <array>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>

namespace cellgate::http {

template <class Stream>
class sse_stream : public stream_sink, public std::enable_shared_from_this<sse_stream<Stream>> {
public:
    // `owner` keeps the connection (and `stream`) alive; `finish` ends the
    // connection once the last chunk is out.
    // `cut_offs` counts the streams ended for a slow client.
    sse_stream(Stream& stream, std::shared_ptr<void> owner, std::size_t max_queue_bytes, std::function<void()> finish,
               std::atomic<std::uint64_t>& cut_offs)
        : stream_(stream),
          owner_(std::move(owner)),
          max_queue_bytes_(max_queue_bytes),
          finish_(std::move(finish)),
          cut_offs_(cut_offs) {}

    void write(std::string chunk) override {
        if (chunk.empty() || overflowed_.load()) return;
        const auto before = pending_bytes_.fetch_add(chunk.size());
        if (before + chunk.size() > max_queue_bytes_) {
            pending_bytes_ -= chunk.size();
            if (!overflowed_.exchange(true)) post([self = this->shared_from_this()] { self->overflow(); });
            return;
        }
        post([self = this->shared_from_this(), c = std::move(chunk)]() mutable {
            self->queue_.push_back(std::move(c));
            self->pump();
        });
    }
    void close() override {
        post([self = this->shared_from_this()] {
            self->closing_ = true;
            self->pump();
        });
    }
    void on_disconnect(std::function<void()> callback) override {
        post([self = this->shared_from_this(), cb = std::move(callback)]() mutable {
            if (self->gone_ || self->cut_off_) return cb();
            self->on_gone_ = std::move(cb);
        });
    }
    // Starts watching for the client going away (it should send nothing now).
    void watch() {
        stream_.async_read_some(boost::asio::buffer(probe_), [self = this->shared_from_this()](boost::system::error_code ec, std::size_t) {
            if (!ec) return self->watch();
            self->gone();
        });
    }

    std::size_t pending_bytes() const noexcept { return pending_bytes_.load(); }

private:
    template <class F>
    void post(F&& f) {
        boost::asio::post(stream_.get_executor(), std::forward<F>(f));
    }

    void overflow() {
        if (gone_ || finished_) return;
        cut_off_ = true;
        ++cut_offs_;
        for (const auto& c : queue_) pending_bytes_ -= c.size();
        queue_.clear();
        queue_.push_back(sse_event("stream_error",
                                   {{"reason", "client_too_slow"},
                                    {"message", "The client fell more than " + std::to_string(max_queue_bytes_) +
                                                    " bytes behind this stream; it was ended and the cell interrupted"}}));
        pending_bytes_ += queue_.back().size();
        closing_ = true;
        if (on_gone_) std::exchange(on_gone_, nullptr)();
        pump();
    }
    void gone() {
        if (gone_) return;
        gone_ = true;
        for (const auto& c : queue_) pending_bytes_ -= c.size();
        queue_.clear();
        if (on_gone_ && !finished_) std::exchange(on_gone_, nullptr)();
    }
    void pump() {
        if (writing_ || gone_) return;
        if (queue_.empty()) {
            if (closing_ && !finished_) {
                finished_ = true;
                writing_ = true;
                boost::asio::async_write(stream_, bhttp::make_chunk_last(),
                                         [self = this->shared_from_this()](boost::system::error_code, std::size_t) {
                                             self->finish_();
                                         });
            }
            return;
        }
        writing_ = true;
        current_ = std::move(queue_.front());
        queue_.pop_front();
        boost::asio::async_write(stream_, bhttp::make_chunk(boost::asio::buffer(current_)),
                                 [self = this->shared_from_this()](boost::system::error_code ec, std::size_t) {
                                     self->writing_ = false;
                                     self->pending_bytes_ -= self->current_.size();
                                     self->current_.clear();
                                     if (ec) return self->gone();
                                     self->pump();
                                 });
    }

    Stream& stream_;
    std::shared_ptr<void> owner_;
    const std::size_t max_queue_bytes_;
    std::function<void()> finish_;
    std::atomic<std::uint64_t>& cut_offs_;
    std::atomic<std::size_t> pending_bytes_{0};  // written, not yet sent (the chunk in flight included)
    std::atomic<bool> overflowed_{false};
    std::deque<std::string> queue_;
    std::string current_;
    std::array<char, 1> probe_{};
    std::function<void()> on_gone_;
    bool writing_ = false, closing_ = false, finished_ = false, gone_ = false, cut_off_ = false;
};

}  // namespace cellgate::http
