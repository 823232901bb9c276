// The budget pass of an execution (execution.hpp), apart from collecting
// the cell: with an output budget, the text parts share it, a DataFrame's
// display becomes its summary, HTML gives way to a plain form, repeated
// traceback frames collapse, and images past max_image_pixels are scaled
// down by the kernel itself, the originals kept in the spool.
#include "agent/execution.hpp"

#include "util/encoding.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <fcntl.h>
#include <unistd.h>
#include <tuple>

namespace cellgate::agent {

namespace asio = boost::asio;
using nlohmann::json;

// Budget mode: every text part shares the budget; a DataFrame's display is
// its summary; HTML goes where a plain form exists; repeated traceback frames
// collapse. What was cut stays readable in the spool (the surface serves it).
void execution::apply_budget(json& result) {
    const auto budget = options_.budget_bytes;
    const bool spooled = !spool_failed_ && !options_.spool_dir.empty();
    std::size_t tables = 0, html_dropped = 0;
    for (auto& r : result["results"]) {
        auto& data = r["data"];
        if (!r["metadata"].is_object()) r["metadata"] = json::object();  // the kernel's: any type
        if (const auto t = data.find(std::string(table_mime_type)); t != data.end()) {
            auto summary = table_summary(*t);
            if (summary.empty()) {
                data.erase(t);  // not a summary after all
                continue;
            }
            data = json::object();
            data["text/plain"] = std::move(summary);
            r["metadata"]["cellgate"] = {{"summary", "table"}};
            ++tables;
        } else if (data.contains("text/html") && (data.contains("text/plain") || data.contains("text/markdown"))) {
            data.erase("text/html");
            ++html_dropped;
        }
    }
    auto& error = result["error"];
    std::string traceback;
    if (error.is_object()) {
        error["traceback"] = collapse_frames(error.value("traceback", json::array()));
        for (const auto& line : error["traceback"])
            if (line.is_string()) traceback += line.get<std::string>() + "\n";
        traceback = strip_ansi(traceback);
    }
    // The parts: stdout, stderr, the traceback, then each result's text forms.
    std::vector<std::size_t> sizes = {static_cast<std::size_t>(captures_[0].total_bytes()),
                                      static_cast<std::size_t>(captures_[1].total_bytes()), traceback.size()};
    std::vector<std::pair<std::size_t, std::string>> texts;  // (result index, MIME type)
    for (std::size_t i = 0; i < result["results"].size(); ++i)
        for (const char* mime : {"text/plain", "text/markdown"})
            if (const auto& d = result["results"][i]["data"]; d.contains(mime) && d[mime].is_string()) {
                texts.emplace_back(i, mime);
                sizes.push_back(d[mime].get_ref<const std::string&>().size());
            }
    const auto shares = share_budget(sizes, budget);
    std::uint64_t shown = 0;
    json elided = json::object();
    for (std::size_t s = 0; s < 2; ++s) {
        const char* name = s == 0 ? "stdout" : "stderr";
        const std::string at = spooled && options_.output_at ? options_.output_at(id_, name) : "";
        const std::string where = at.empty() ? "" : "; all of it: " + at;
        auto text = captures_[s].render(shares[s], where);
        if (!captures_[s].whole() || text.size() < captures_[s].total_bytes())
            elided[name] = captures_[s].total_bytes();
        shown += text.size();
        result[name] = std::move(text);
    }
    if (error.is_object()) {
        auto cut = head_and_tail(traceback, shares[2]);
        if (cut.size() < traceback.size()) error["traceback"] = json::array({cut});
        shown += cut.size();
        error["traceback_text"] = std::move(cut);
    }
    for (std::size_t j = 0; j < texts.size(); ++j) {
        auto& value = result["results"][texts[j].first]["data"][texts[j].second];
        value = head_and_tail(value.get<std::string>(), shares[3 + j]);
        shown += value.get_ref<const std::string&>().size();
    }
    result["budget"] = {{"max_output_bytes", budget},
                        {"estimated_tokens", (shown + bytes_per_token - 1) / bytes_per_token},
                        {"bytes_per_token", bytes_per_token},
                        {"elided_streams", std::move(elided)},
                        {"output_kept", spooled},
                        {"output_complete", spooled && !stdout_truncated_ && !stderr_truncated_},
                        {"tables_summarized", tables},
                        {"html_dropped", html_dropped},
                        {"images_downscaled", images_downscaled_},
                        {"max_image_pixels", options_.max_image_pixels}};
}

// Budget mode: PNG and JPEG results over max_image_pixels are scaled down by
// the kernel itself (the gateway never decodes an image); the original is
// kept beside the output for the session's life.
void execution::downscale_images(std::function<void()> then) {
    json expressions = json::object();
    std::vector<std::tuple<std::size_t, std::string, std::string, std::pair<std::uint32_t, std::uint32_t>>> jobs;
    for (std::size_t i = 0; i < results_.size(); ++i) {
        auto& data = results_[i]["data"];
        for (const char* mime : {"image/png", "image/jpeg"}) {
            if (!data.contains(mime) || !data[mime].is_string()) continue;
            std::string b64 = data[mime].get<std::string>();
            b64.erase(std::remove_if(b64.begin(), b64.end(), [](char c) { return c == '\n' || c == '\r'; }), b64.end());
            const auto bytes = base64_decode(b64);
            const auto size = bytes ? image_size(*bytes) : std::nullopt;
            if (!size || static_cast<std::uint64_t>(size->first) * size->second <= options_.max_image_pixels) continue;
            const auto key = "i" + std::to_string(jobs.size());
            expressions[key] = "__import__('_cellgate').downscale(" + json(b64).dump() + ", '" + mime + "', " +
                               std::to_string(options_.max_image_pixels) + ")";
            jobs.emplace_back(i, mime, key, *size);
        }
    }
    if (jobs.empty()) return then();
    auto once = std::make_shared<std::atomic<bool>>(false);
    auto self = shared_from_this();
    auto finish_with = [self, once, then, jobs](json reply) {
        if (once->exchange(true)) return;
        asio::post(self->strand_, [self, then, jobs, reply = std::move(reply)] {
            const auto exprs = reply.is_object() ? reply.value("user_expressions", json::object()) : json::object();
            std::vector<std::pair<std::filesystem::path, std::string>> originals;
            for (std::size_t n = 0; n < jobs.size(); ++n) {
                const auto& [index, mime, key, size] = jobs[n];
                const auto& out = exprs.contains(key) ? exprs[key] : json();
                // The kernel's reply: any type anywhere.
                const auto status = out.is_object() ? out.find("status") : out.end();
                if (!out.is_object() || status == out.end() || *status != "ok") continue;
                const auto data = out.find("data");
                if (data == out.end() || !data->is_object() || !data->contains("text/plain") ||
                    !(*data)["text/plain"].is_string())
                    continue;
                auto text = (*data)["text/plain"].get<std::string>();
                if (text.size() < 2 || (text.front() != '\'' && text.front() != '"')) continue;
                text = text.substr(1, text.size() - 2);
                const auto small = base64_decode(text);
                const auto small_size = small ? image_size(*small) : std::nullopt;
                if (!small_size) continue;
                auto& r = self->results_[index];
                json note = {{"downscaled_from", {size.first, size.second}}, {"size", {small_size->first, small_size->second}}};
                if (!self->options_.spool_dir.empty()) {
                    const auto name = self->id_ + ".image-" + std::to_string(n) + (mime == "image/png" ? ".png" : ".jpg");
                    originals.emplace_back(self->options_.spool_dir / name, r["data"][mime].get<std::string>());
                    note["original"] = n;
                }
                r["data"][mime] = text;
                if (!r["metadata"].is_object()) r["metadata"] = json::object();
                r["metadata"]["cellgate"] = std::move(note);
                ++self->images_downscaled_;
            }
            // The originals go to disk off the strand; the result does not wait for them.
            self->on_file_pool([originals = std::move(originals)] {
                for (const auto& [path, b64] : originals)
                    if (const auto bytes = base64_decode(b64)) {
                        const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600);
                        if (fd < 0) continue;
                        std::size_t done = 0;
                        while (done < bytes->size()) {
                            const auto w = ::write(fd, bytes->data() + done, bytes->size() - done);
                            if (w <= 0) break;
                            done += static_cast<std::size_t>(w);
                        }
                        ::close(fd);
                    }
            });
            then();
        });
    };
    // A kernel that does not answer in time keeps its images as they are.
    auto timer = std::make_shared<asio::steady_timer>(strand_, std::chrono::seconds(30));
    timer->async_wait([finish_with, timer](const boost::system::error_code& ec) {
        if (!ec) finish_with(nullptr);
    });
    kernel_->run_silent("", [self, finish_with, timer](const json& reply) {
        asio::post(self->strand_, [timer] { timer->cancel(); });
        finish_with(reply);
    }, std::move(expressions));
}

}  // namespace cellgate::agent
