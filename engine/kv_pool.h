// The bookkeeping of a paged KV cache (issue 21): which page holds which
// positions of each sequence, pages shared between sequences (a fork, a
// common prompt prefix), copy-on-write of a shared page that is still being
// filled, and the reuse of pages no sequence holds, least recently used
// first. It owns no K/V memory: a backend keeps `n_pages` pages of
// `page_size` positions (of every layer it serves) and does what this says:
// writes a sequence's new positions into the pages `append` reserved, after
// the copies it returned.
//
// A page is either free, in use (held by one or more sequences: a reference
// each), or cached (full, held by none, still findable by its tokens). Full
// pages are never written again, so sharing them needs no copy; a partly
// filled page shared by a fork is copied by whichever sequence appends to it
// first. Full pages are found by a hash chain over the page-aligned prefixes
// of the tokens they hold, checked against the tokens themselves.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ptxlm {

class KvPool {
public:
    using Seq = uint32_t;
    using Token = int32_t;
    static constexpr uint32_t kNoPage = UINT32_MAX;   // a page table slot released by drop_before

    // Copy the first `positions` positions of page `from` into page `to`
    // before writing to `to`.
    struct Copy {
        uint32_t from = 0, to = 0, positions = 0;
        bool operator==(const Copy&) const = default;
    };

    struct Stats {
        uint32_t pages = 0, used = 0, cached = 0, free = 0;
        uint32_t sequences = 0;
        uint64_t prefix_hit_tokens = 0;   // tokens attach_prefix found, summed over calls
        uint64_t evictions = 0;           // cached pages taken for new positions
    };

    // Throws std::invalid_argument for no pages or a page of no positions.
    KvPool(uint32_t n_pages, uint32_t page_size);

    uint32_t page_size() const { return page_size_; }
    uint32_t n_pages() const { return uint32_t(pages_.size()); }

    // A new sequence with no positions.
    Seq create();
    // A new sequence holding every page of `parent` (its positions so far).
    Seq fork(Seq parent);
    // Ends a sequence: each of its pages loses a reference. A full page no
    // sequence holds any more stays cached; a partly filled one is free.
    void release(Seq s);

    // For a sequence with no positions yet: attaches the longest run of full
    // pages, in use or cached, that hold `tokens`' page-aligned prefixes, and
    // returns how many tokens they hold (a multiple of page_size). Pass only
    // tokens whose K/V may be reused (a caller that needs the last prompt
    // token's logits leaves it out).
    uint32_t attach_prefix(Seq s, std::span<const Token> tokens);

    // Reserves pages for `tokens` at positions length(s) .. length(s) + n:
    // new pages from the free ones, else the least recently cached. When the
    // sequence's last page is partly filled and shared, it is copied to a
    // new page first (appended to `copies`). Returns false, changing nothing,
    // when the pool cannot hold them.
    bool append(Seq s, std::span<const Token> tokens, std::vector<Copy>& copies);

    // Releases the pages whose positions all lie below `pos` (a sliding
    // window's past); their slots become kNoPage.
    void drop_before(Seq s, uint32_t pos);

    // Keeps the first `length` positions (a conversation rewound to the
    // prefix a new prompt shares): the pages past them lose the sequence's
    // reference; a full page now partly kept is no longer findable by its
    // tokens when the sequence holds it alone (it will be rewritten), and is
    // copied on write by the next append when it is shared. Throws
    // std::invalid_argument past the sequence's length or into a page
    // drop_before released. `forget`: the positions past `length` were never
    // written (reserved, then abandoned), so the full pages released are not
    // kept findable either.
    void truncate(Seq s, uint32_t length, bool forget = false);

    // How many tokens attach_prefix would find for `tokens` (a multiple of
    // page_size), attaching nothing.
    uint32_t prefix_length(std::span<const Token> tokens) const;

    std::span<const uint32_t> pages(Seq s) const;
    uint32_t length(Seq s) const;
    // Pages `append` would need for n more positions of s (copies included).
    uint32_t pages_needed(Seq s, uint32_t n) const;
    // Pages append can take now: free or cached.
    uint32_t available() const { return uint32_t(free_.size() + lru_.size()); }
    Stats stats() const;
    // References to page p (sequences whose table holds it).
    uint32_t refs(uint32_t p) const { return pages_.at(p).refs; }

private:
    struct Page {
        uint32_t refs = 0;
        bool hashed = false;                 // full, in index_ under `hash`
        uint64_t hash = 0;                   // of the chain up to and including this page
        std::vector<Token> tokens;           // what it holds (checked on a hash match)
        std::list<uint32_t>::iterator lru;   // valid while cached
        bool cached = false;
    };
    struct Sequence {
        bool live = false;
        uint32_t length = 0;
        std::vector<uint32_t> pages;
        std::vector<uint64_t> hashes;        // chain hash of each full page
        std::vector<Token> tail;             // tokens of the partly filled last page
    };

    Sequence& seq(Seq s);
    const Sequence& seq(Seq s) const;
    uint32_t take_page();
    void unref(uint32_t p);
    void ref(uint32_t p);
    void unhash(uint32_t p);
    // The findable full pages holding `tokens`' page-aligned prefixes, in
    // order, each with its chain hash (what attach_prefix attaches).
    std::vector<std::pair<uint32_t, uint64_t>> find_prefix(std::span<const Token> tokens) const;
    uint64_t chain(uint64_t prev, std::span<const Token> tokens) const;

    uint32_t page_size_;
    std::vector<Page> pages_;
    std::vector<uint32_t> free_;
    std::list<uint32_t> lru_;                       // cached pages, least recently cached first
    std::unordered_map<uint64_t, uint32_t> index_;   // chain hash -> full page
    std::vector<Sequence> seqs_;
    std::vector<Seq> free_seqs_;
    uint64_t prefix_hits_ = 0, evictions_ = 0;
};

}  // namespace ptxlm
