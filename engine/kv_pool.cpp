#include "engine/kv_pool.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ptxlm {

namespace {

uint64_t mix(uint64_t x) {   // splitmix64's finaliser
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

}  // namespace

KvPool::KvPool(uint32_t n_pages, uint32_t page_size) : page_size_(page_size), pages_(n_pages) {
    if (n_pages == 0) throw std::invalid_argument("kv pool: no pages");
    if (page_size == 0) throw std::invalid_argument("kv pool: pages of no positions");
    free_.reserve(n_pages);
    for (uint32_t p = n_pages; p-- > 0;) free_.push_back(p);   // page 0 is taken first
}

KvPool::Sequence& KvPool::seq(Seq s) {
    if (s >= seqs_.size() || !seqs_[s].live) throw std::invalid_argument("kv pool: sequence " + std::to_string(s) + " is not open");
    return seqs_[s];
}

const KvPool::Sequence& KvPool::seq(Seq s) const { return const_cast<KvPool*>(this)->seq(s); }

KvPool::Seq KvPool::create() {
    Seq s;
    if (!free_seqs_.empty()) {
        s = free_seqs_.back();
        free_seqs_.pop_back();
    } else {
        s = Seq(seqs_.size());
        seqs_.emplace_back();
    }
    seqs_[s] = Sequence{};
    seqs_[s].live = true;
    return s;
}

KvPool::Seq KvPool::fork(Seq parent) {
    seq(parent);   // checks it is open before create() may move seqs_
    const Seq s = create();
    Sequence& c = seqs_[s];
    c = seqs_[parent];
    for (uint32_t p : c.pages)
        if (p != kNoPage) ref(p);
    return s;
}

void KvPool::release(Seq s) {
    Sequence& q = seq(s);
    for (uint32_t p : q.pages)
        if (p != kNoPage) unref(p);
    q = Sequence{};
    free_seqs_.push_back(s);
}

void KvPool::ref(uint32_t p) {
    Page& g = pages_[p];
    if (g.cached) {
        lru_.erase(g.lru);
        g.cached = false;
    }
    ++g.refs;
}

void KvPool::unref(uint32_t p) {
    Page& g = pages_[p];
    if (g.refs == 0) throw std::logic_error("kv pool: page " + std::to_string(p) + " released twice");
    if (--g.refs) return;
    if (g.hashed) {   // findable by its tokens: cached until the pool needs it
        g.lru = lru_.insert(lru_.end(), p);
        g.cached = true;
    } else {
        g.tokens.clear();
        free_.push_back(p);
    }
}

uint32_t KvPool::take_page() {
    uint32_t p;
    if (!free_.empty()) {
        p = free_.back();
        free_.pop_back();
    } else {
        if (lru_.empty()) throw std::logic_error("kv pool: no page to take (append checks first)");
        p = lru_.front();
        lru_.pop_front();
        pages_[p].cached = false;
        unhash(p);
        pages_[p].tokens.clear();
        ++evictions_;
    }
    pages_[p].refs = 1;
    return p;
}

void KvPool::unhash(uint32_t p) {
    Page& g = pages_[p];
    if (!g.hashed) return;
    auto it = index_.find(g.hash);
    if (it != index_.end() && it->second == p) index_.erase(it);
    g.hashed = false;
}

uint64_t KvPool::chain(uint64_t prev, std::span<const Token> tokens) const {
    uint64_t h = mix(prev ^ 0x9e3779b97f4a7c15ull);
    for (Token t : tokens) h = mix(h ^ (uint64_t(uint32_t(t)) + 0x9e3779b97f4a7c15ull));
    return h;
}

std::vector<std::pair<uint32_t, uint64_t>> KvPool::find_prefix(std::span<const Token> tokens) const {
    std::vector<std::pair<uint32_t, uint64_t>> found;
    uint64_t h = 0;
    for (size_t at = 0; at + page_size_ <= tokens.size(); at += page_size_) {
        const std::span<const Token> page = tokens.subspan(at, page_size_);
        h = chain(h, page);
        auto it = index_.find(h);
        if (it == index_.end() || !std::equal(page.begin(), page.end(), pages_[it->second].tokens.begin(),
                                              pages_[it->second].tokens.end()))
            break;
        found.push_back({it->second, h});
    }
    return found;
}

uint32_t KvPool::attach_prefix(Seq s, std::span<const Token> tokens) {
    Sequence& q = seq(s);
    if (q.length) throw std::invalid_argument("kv pool: attach_prefix on a sequence that has positions");
    for (const auto& [p, h] : find_prefix(tokens)) {
        ref(p);
        q.pages.push_back(p);
        q.hashes.push_back(h);
        q.length += page_size_;
    }
    prefix_hits_ += q.length;
    return q.length;
}

uint32_t KvPool::pages_needed(Seq s, uint32_t n) const {
    const Sequence& q = seq(s);
    if (n == 0) return 0;
    const uint32_t more = ceil_div(q.length + n, page_size_) - ceil_div(q.length, page_size_);
    const bool copy = q.length % page_size_ && pages_[q.pages.back()].refs > 1;
    return more + (copy ? 1 : 0);
}

bool KvPool::append(Seq s, std::span<const Token> tokens, std::vector<Copy>& copies) {
    if (tokens.empty()) return true;
    if (pages_needed(s, uint32_t(tokens.size())) > available()) return false;
    Sequence& q = seq(s);
    const uint32_t fill = q.length % page_size_;
    if (fill && pages_[q.pages.back()].refs > 1) {   // shared and still being filled: copy on write
        const uint32_t from = q.pages.back(), to = take_page();
        copies.push_back({from, to, fill});
        unref(from);
        q.pages.back() = to;
    }
    for (Token t : tokens) {
        if (q.length % page_size_ == 0) q.pages.push_back(take_page());
        q.tail.push_back(t);
        ++q.length;
        if (q.tail.size() == page_size_) {   // the page is full: findable from now on
            const uint64_t h = chain(q.hashes.empty() ? 0 : q.hashes.back(), q.tail);
            q.hashes.push_back(h);
            Page& g = pages_[q.pages.back()];
            g.tokens = q.tail;
            g.hash = h;
            if (index_.emplace(h, q.pages.back()).second) g.hashed = true;
            q.tail.clear();
        }
    }
    return true;
}

void KvPool::drop_before(Seq s, uint32_t pos) {
    Sequence& q = seq(s);
    if (pos > q.length)
        throw std::invalid_argument("kv pool: drop_before " + std::to_string(pos) + " past the sequence's " +
                                    std::to_string(q.length) + " positions");
    for (uint32_t i = 0; i < pos / page_size_; ++i) {
        if (q.pages[i] == kNoPage) continue;
        unref(q.pages[i]);
        q.pages[i] = kNoPage;
    }
}

uint32_t KvPool::prefix_length(std::span<const Token> tokens) const {
    return uint32_t(find_prefix(tokens).size()) * page_size_;
}

void KvPool::truncate(Seq s, uint32_t length, bool forget) {
    Sequence& q = seq(s);
    if (length > q.length)
        throw std::invalid_argument("kv pool: truncate to " + std::to_string(length) + " past the sequence's " +
                                    std::to_string(q.length) + " positions");
    if (length == q.length) return;
    const uint32_t keep = ceil_div(length, page_size_), fill = length % page_size_;
    std::vector<Token> tail;
    if (fill) {
        const uint32_t p = q.pages[keep - 1];
        if (p == kNoPage)
            throw std::invalid_argument("kv pool: truncate to " + std::to_string(length) +
                                        " inside a page a sliding window released");
        const bool was_full = keep - 1 < q.hashes.size();
        const std::vector<Token>& held = was_full ? pages_[p].tokens : q.tail;
        tail.assign(held.begin(), held.begin() + fill);
        if (was_full && pages_[p].refs == 1) unhash(p);   // this sequence will write it again
    }
    for (uint32_t i = keep; i < q.pages.size(); ++i) {
        if (q.pages[i] == kNoPage) continue;
        if (forget && pages_[q.pages[i]].refs == 1) unhash(q.pages[i]);
        unref(q.pages[i]);
    }
    q.pages.resize(keep);
    q.hashes.resize(std::min<size_t>(q.hashes.size(), length / page_size_));
    q.tail = std::move(tail);
    q.length = length;
}

std::span<const uint32_t> KvPool::pages(Seq s) const { return seq(s).pages; }

uint32_t KvPool::length(Seq s) const { return seq(s).length; }

KvPool::Stats KvPool::stats() const {
    Stats st;
    st.pages = n_pages();
    st.free = uint32_t(free_.size());
    st.cached = uint32_t(lru_.size());
    st.used = st.pages - st.free - st.cached;
    for (const Sequence& q : seqs_) st.sequences += q.live;
    st.prefix_hit_tokens = prefix_hits_;
    st.evictions = evictions_;
    return st;
}

}  // namespace ptxlm
