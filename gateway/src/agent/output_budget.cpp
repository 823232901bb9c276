#include "agent/output_budget.hpp"

#include "agent/execution.hpp"
#include "util/encoding.hpp"

#include <algorithm>
#include <numeric>

namespace cellgate::agent {

std::string strip_ansi(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '\x1b' && i + 1 < text.size() && text[i + 1] == '[') {
            i += 2;
            while (i < text.size() && !(text[i] >= '@' && text[i] <= '~')) ++i;  // parameters, then the final byte
            continue;
        }
        out.push_back(text[i]);
    }
    return out;
}

using nlohmann::json;

namespace {

// The first byte of a UTF-8 sequence at or after `i`.
std::size_t sequence_start(std::string_view text, std::size_t i) {
    while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) ++i;
    return i;
}

std::string marker(std::uint64_t bytes, std::uint64_t lines, std::string_view where) {
    return "\n… " + std::to_string(bytes) + " bytes (" + std::to_string(lines) + " lines) elided" + std::string(where) +
           " …\n";
}

}  // namespace

std::vector<std::size_t> share_budget(const std::vector<std::size_t>& sizes, std::size_t budget) {
    std::vector<std::size_t> order(sizes.size()), out(sizes.size(), 0);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return sizes[a] < sizes[b]; });
    std::size_t left = budget, parts = sizes.size();
    for (const auto i : order) {
        const auto fair = left / std::max<std::size_t>(parts--, 1);
        out[i] = std::min(sizes[i], fair);
        left -= out[i];
    }
    return out;
}

std::string head_and_tail(std::string_view text, std::size_t budget, std::string_view where) {
    if (text.size() <= budget) return std::string(text);
    // A share too small for the marker: as much of the head as fits, so the
    // budget stays a ceiling.
    if (budget <= marker_room + where.size()) return std::string(text.substr(0, utf8_complete_length(text.substr(0, budget))));
    const std::size_t keep = budget - marker_room - where.size();
    const std::size_t head = utf8_complete_length(text.substr(0, keep / 2));
    std::size_t tail_start = sequence_start(text, text.size() - (keep - keep / 2));
    tail_start = std::max(tail_start, head);
    const auto middle = text.substr(head, tail_start - head);
    std::string out(text.substr(0, head));
    out += marker(middle.size(), static_cast<std::uint64_t>(std::count(middle.begin(), middle.end(), '\n')), where);
    out += text.substr(tail_start);
    return out;
}

void text_capture::append(std::string_view piece) {
    total_ += piece.size();
    lines_ += static_cast<std::uint64_t>(std::count(piece.begin(), piece.end(), '\n'));
    if (head_.size() < keep_) {
        const auto room = keep_ - head_.size();
        head_ += piece.substr(0, room);
        if (piece.size() <= room) {
            tail_ = head_;  // all of it so far
            return;
        }
    }
    tail_ += piece;
    if (tail_.size() > 2 * keep_) tail_.erase(0, tail_.size() - keep_);
}

std::string text_capture::render(std::size_t budget, std::string_view where) const {
    if (whole()) return head_and_tail(head_, budget, where);
    if (budget <= marker_room + where.size())  // as head_and_tail: the head alone, within the budget
        return head_.substr(0, utf8_complete_length(std::string_view(head_).substr(0, std::min(budget, head_.size()))));
    const std::string_view tail_view = std::string_view(tail_).substr(tail_.size() > keep_ ? tail_.size() - keep_ : 0);
    const std::size_t keep = budget - marker_room - where.size();
    const std::size_t head = utf8_complete_length(std::string_view(head_).substr(0, std::min(keep / 2, head_.size())));
    const std::size_t want_tail = std::min(keep - keep / 2, tail_view.size());
    const std::size_t tail_start = sequence_start(tail_view, tail_view.size() - want_tail);
    const auto kept_head = std::string_view(head_).substr(0, head);
    const auto kept_tail = tail_view.substr(tail_start);
    const std::uint64_t elided = total_ - kept_head.size() - kept_tail.size();
    const auto kept_lines = static_cast<std::uint64_t>(std::count(kept_head.begin(), kept_head.end(), '\n') +
                                                       std::count(kept_tail.begin(), kept_tail.end(), '\n'));
    return std::string(kept_head) + marker(elided, lines_ >= kept_lines ? lines_ - kept_lines : 0, where) +
           std::string(kept_tail);
}

json collapse_frames(const json& traceback) {
    if (!traceback.is_array()) return traceback;
    json out = json::array();
    std::string previous;
    std::size_t repeats = 0;
    auto flush = [&] {
        if (repeats > 0)
            out.push_back("[… the frame above repeated " + std::to_string(repeats) + " more time" + (repeats == 1 ? "" : "s") + "]");
        repeats = 0;
    };
    for (const auto& frame : traceback) {
        const auto plain = frame.is_string() ? strip_ansi(frame.get<std::string>()) : frame.dump();
        if (!out.empty() && plain == previous) {
            ++repeats;
            continue;
        }
        flush();
        previous = plain;
        out.push_back(frame);
    }
    flush();
    return out;
}

std::optional<std::pair<std::uint32_t, std::uint32_t>> image_size(std::string_view b) {
    auto be32 = [&b](std::size_t i) {
        return (static_cast<std::uint32_t>(static_cast<unsigned char>(b[i])) << 24) |
               (static_cast<std::uint32_t>(static_cast<unsigned char>(b[i + 1])) << 16) |
               (static_cast<std::uint32_t>(static_cast<unsigned char>(b[i + 2])) << 8) |
               static_cast<std::uint32_t>(static_cast<unsigned char>(b[i + 3]));
    };
    auto be16 = [&b](std::size_t i) {
        return static_cast<std::uint32_t>((static_cast<unsigned char>(b[i]) << 8) | static_cast<unsigned char>(b[i + 1]));
    };
    if (b.size() >= 24 && b.substr(0, 8) == std::string_view("\x89PNG\r\n\x1a\n", 8) && b.substr(12, 4) == "IHDR")
        return std::pair(be32(16), be32(20));
    if (b.size() >= 4 && static_cast<unsigned char>(b[0]) == 0xFF && static_cast<unsigned char>(b[1]) == 0xD8) {
        std::size_t i = 2;
        while (i + 9 < b.size()) {
            if (static_cast<unsigned char>(b[i]) != 0xFF) return std::nullopt;
            const auto m = static_cast<unsigned char>(b[i + 1]);
            if (m == 0xFF) {
                ++i;
                continue;
            }
            const auto len = be16(i + 2);
            // SOF0…SOF15, except DHT (C4), JPG (C8) and DAC (CC).
            if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) return std::pair(be16(i + 7), be16(i + 5));
            if (len < 2) return std::nullopt;
            i += 2 + len;
        }
    }
    return std::nullopt;
}

std::string table_summary(const json& t) {
    // The kernel made this: any member may be missing or of any type.
    if (!t.is_object()) return "";
    auto text = [&t](const char* key) {
        const auto it = t.find(key);
        return it != t.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    std::string out = text("kind").empty() ? "DataFrame" : text("kind").substr(0, 64);
    if (const auto it = t.find("shape"); it != t.end() && it->is_array() && !it->empty() && it->size() <= 2 &&
                                         std::all_of(it->begin(), it->end(), [](const json& n) { return n.is_number_integer(); })) {
        out += ": " + (*it)[0].dump() + " rows";
        if (it->size() == 2) out += " × " + (*it)[1].dump() + " columns";
    }
    out += "\n";
    if (const auto it = t.find("columns"); it != t.end() && it->is_object() && !it->empty()) {
        out += "columns:";
        std::size_t n = 0;
        for (const auto& [name, dtype] : it->items()) {
            if (n++ == 100) {
                out += " …";
                break;
            }
            out += " " + name.substr(0, 100) + " (" + (dtype.is_string() ? dtype.get<std::string>().substr(0, 40) : dtype.dump().substr(0, 40)) + ")";
        }
        out += "\n";
    }
    if (const auto head = text("head"); !head.empty()) out += "first rows:\n" + head + (head.ends_with('\n') ? "" : "\n");
    return out;
}

}  // namespace cellgate::agent
