#include "engine/session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

namespace ptxlm {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::Stop: return "stop";
        case FinishReason::Length: return "length";
        case FinishReason::ContextFull: return "context_full";
        case FinishReason::Cancelled: return "cancelled";
    }
    return "?";
}

Session::Session(Backend& backend, const Tokenizer& tokenizer)
    : backend_(backend), tok_(tokenizer), logits_(backend.n_vocab()) {
    for (TokenId id = 0; id < tok_.n_vocab(); ++id)
        if (tok_.is_eog(id)) eog_.push_back(id);
}

void Session::prefill(std::span<const TokenId> prompt) {
    if (prompt.empty()) throw std::invalid_argument("the prompt is empty");
    if (prompt.size() >= backend_.n_ctx())
        throw ContextFullError("the prompt has " + std::to_string(prompt.size()) + " tokens and the context holds " +
                               std::to_string(backend_.n_ctx()) + ": no room to generate (raise -c or shorten the prompt)");
    size_t keep = 0;
    while (keep < cached_.size() && keep < prompt.size() && cached_[keep] == prompt[keep]) ++keep;
    // The last prompt token is always evaluated: its logits start generation.
    if (keep == prompt.size()) --keep;
    const auto t0 = std::chrono::steady_clock::now();
    // Pages other sequences evaluated may hold more of the prompt's start.
    keep = backend_.reuse_prefix(prompt.first(prompt.size() - 1), uint32_t(keep));
    cached_.assign(prompt.begin(), prompt.begin() + keep);
    for (size_t i = keep; i < prompt.size();) {
        const size_t n = std::min<size_t>(backend_.max_batch(), prompt.size() - i);
        const bool last = i + n == prompt.size();
        backend_.eval_batch(prompt.subspan(i, n), static_cast<uint32_t>(i), last ? logits_.data() : nullptr, last ? 1 : 0);
        cached_.insert(cached_.end(), prompt.begin() + i, prompt.begin() + i + n);
        i += n;
    }
    last_prompt_ = {};
    last_prompt_.prompt_tokens = static_cast<uint32_t>(prompt.size() - keep);
    last_prompt_.prompt_reused = static_cast<uint32_t>(keep);
    last_prompt_.prompt_ms = ms_since(t0);
}

Generation Session::generate(const GenerateOptions& opt, const std::function<void(std::string_view)>& on_text,
                             const std::atomic<bool>* cancel) {
    Generator gen(*this, opt, cancel);
    while (!gen.done()) {
        GenStep st = gen.step();
        if (on_text && !st.text.empty()) on_text(st.text);
    }
    return gen.take_result();
}

namespace {
const GenerateOptions& checked(const Session& s, const GenerateOptions& opt) {
    if (s.cached().empty()) throw std::logic_error("generation before Session::prefill");
    validate(opt.sampling);
    return opt;
}
}  // namespace

Generator::Generator(Session& session, const GenerateOptions& opt, const std::atomic<bool>* cancel, int top_logprobs)
    : s_(session),
      opt_(checked(session, opt)),
      cancel_(cancel),
      top_logprobs_(top_logprobs),
      sampler_(opt.sampling, static_cast<int32_t>(session.logits_.size())),
      decoder_(session.tok_),
      stops_(opt.stop),
      work_(session.logits_.size()) {
    g_.timings = s_.last_prompt_;
    const std::vector<TokenId>& cached = s_.cached_;
    const size_t window = opt_.sampling.penalty_last_n > 0 ? size_t(opt_.sampling.penalty_last_n) : 0;
    for (size_t i = cached.size() > window ? cached.size() - window : 0; i < cached.size(); ++i)
        sampler_.accept(cached[i]);
    // Plain greedy decoding needs only the argmax of each step's logits,
    // which the backend may compute where the logits are (the GPU copies
    // back one id instead of the vocabulary's logits). Log-probabilities
    // need the logits themselves.
    const SamplerParams& sp = opt_.sampling;
    const bool penalties = sp.penalty_last_n > 0 &&
                           (sp.repeat_penalty != 1.0f || sp.presence_penalty != 0.0f || sp.frequency_penalty != 0.0f);
    argmax_only_ = sp.temperature <= 0 && !penalties && sp.logit_bias.empty() && !opt_.ignore_eos && top_logprobs_ < 0 &&
                   !opt_.grammar;
    if (opt_.grammar) {
        if (!opt_.grammar->grammar) throw std::invalid_argument("a grammar constraint without a grammar");
        const GrammarConstraint& gc = *opt_.grammar;
        in_reasoning_ = gc.in_reasoning;
        if (gc.triggers.empty()) {
            if (gc.opening && !in_reasoning_) matcher_.emplace(gc.opening), opening_ = true;
            else if (!in_reasoning_ || !gc.after_reasoning) matcher_.emplace(gc.grammar), in_reasoning_ = false;
        }
    }
    t0_ = std::chrono::steady_clock::now();
}

void Generator::finish(FinishReason why, GenStep& st) {
    stream_.reset();   // stops the device's run-ahead within a token
    g_.finish = why;
    // The held tail: an unfinished character, a possible stop-string start.
    if (!stops_.stopped()) st.text += stops_.push(decoder_.flush());
    if (!stops_.stopped()) st.text += stops_.flush();
    g_.stop = stops_.matched();
    g_.text += st.text;
    g_.timings.generated = static_cast<uint32_t>(g_.tokens.size());
    g_.timings.generate_ms = ms_since(t0_);
    st.done = done_ = true;
}

bool Generator::grammar_allows(TokenId t) const {
    const Tokenizer& tok = s_.tok_;
    if (tok.is_eog(t)) return !opt_.ignore_eos && matcher_->can_end();
    const std::string bytes = tok.piece(t);
    if (bytes.empty()) return false;   // a control token: never allowed (as in the filter)
    grammar::Matcher m = *matcher_;
    return m.accept(bytes);
}

void Generator::follow_grammar(TokenId t) {
    const std::string bytes = s_.tok_.piece(t);
    const GrammarConstraint& gc = *opt_.grammar;
    if (matcher_) {
        // The filter allowed t, so the matcher takes it.
        if (!matcher_->accept(bytes)) throw std::logic_error("the grammar refused a token its filter allowed");
        if (!opening_) return;
        // The first bytes: the reasoning block's opening tag, or the grammar's text.
        raw_ += bytes;
        const size_t b = raw_.find_first_not_of(" \t\r\n");
        if (b == std::string::npos) return;
        if (raw_.compare(b, gc.reasoning_open.size(), gc.reasoning_open) == 0) {
            matcher_.reset();   // free text until the block closes
            opening_ = false;
            opening_checked_ = true;
            in_reasoning_ = true;
            search_from_ = b + gc.reasoning_open.size();
        } else {
            // Past the point where the tag could come: the opening grammar's
            // other branch, the grammar's text, goes on alone.
            if (gc.reasoning_open.compare(0, raw_.size() - b, raw_, b) != 0) opening_ = false;
            return;
        }
    } else {
        raw_ += bytes;
    }
    if (!opening_checked_ && !gc.reasoning_open.empty()) {
        // Does the answer open a reasoning block (after leading whitespace)?
        const size_t b = raw_.find_first_not_of(" \t\r\n");
        if (b != std::string::npos && raw_.size() - b >= gc.reasoning_open.size()) {
            opening_checked_ = true;
            if (raw_.compare(b, gc.reasoning_open.size(), gc.reasoning_open) == 0) in_reasoning_ = true;
        } else if (b != std::string::npos && gc.reasoning_open.compare(0, raw_.size() - b, raw_, b) != 0) {
            opening_checked_ = true;   // already differs
        } else {
            return;   // too short to tell
        }
    }
    if (in_reasoning_) {
        const size_t close = gc.reasoning_close.empty() ? std::string::npos : raw_.find(gc.reasoning_close, search_from_);
        if (close == std::string::npos) {
            // Keep looking from where the closing tag could still begin.
            search_from_ = raw_.size() > gc.reasoning_close.size() ? raw_.size() - gc.reasoning_close.size() : 0;
            return;
        }
        in_reasoning_ = false;
        search_from_ = close + gc.reasoning_close.size();
        if (gc.triggers.empty()) {
            // The whole rest follows the grammar, from the bytes after the tag
            // (a token that went on past it in text the grammar refuses: from
            // the next token).
            grammar::Matcher m(gc.after_reasoning ? gc.after_reasoning : gc.grammar);
            grammar::Matcher rest = m;
            matcher_ = rest.accept(std::string_view(raw_).substr(search_from_)) ? std::move(rest) : std::move(m);
            return;
        }
    }
    size_t longest = 0;
    for (const std::string& trig : gc.triggers) longest = std::max(longest, trig.size());
    for (;;) {
        size_t at = std::string::npos;
        for (const std::string& trig : gc.triggers) at = std::min(at, raw_.find(trig, search_from_));
        if (at == std::string::npos) {
            // A trigger that is not there yet can only begin in the last bytes.
            if (raw_.size() >= longest) search_from_ = std::max(search_from_, raw_.size() - longest + 1);
            return;
        }
        grammar::Matcher m(gc.grammar);
        if (m.accept(std::string_view(raw_).substr(at))) {
            matcher_ = std::move(m);
            return;
        }
        search_from_ = at + 1;   // this occurrence does not start the grammar's text
    }
}

GenStep Generator::step() {
    if (done_) throw std::logic_error("Generator::step after the end of generation");
    GenStep st;
    const size_t max_tokens = opt_.max_tokens >= 0 ? size_t(opt_.max_tokens) : SIZE_MAX;
    if (cancel_ && cancel_->load()) { finish(FinishReason::Cancelled, st); return st; }
    if (g_.tokens.size() >= max_tokens) { finish(FinishReason::Length, st); return st; }
    const Tokenizer& tok = s_.tok_;
    TokenId t;
    if (next_queued_) next_ = s_.argmax_;   // written by the backend (a queuing one: by the step that ran the token)
    next_queued_ = false;
    if (next_) {
        t = *next_;
    } else {
        // The logits the sampler may change (ended tokens out with ignore_eos).
        const auto fresh_work = [this] {
            work_.assign(s_.logits_.begin(), s_.logits_.end());
            // A grammar for the whole answer waits for the reasoning block to
            // close: the answer cannot end inside it.
            const bool no_end = opt_.ignore_eos || (opt_.grammar && !matcher_ && opt_.grammar->triggers.empty());
            if (no_end)
                for (TokenId id : s_.eog_) work_[id] = -INFINITY;
        };
        fresh_work();
        t = -1;
        if (matcher_) {
            // Nothing can follow and the grammar cannot end here: no token is allowed.
            if (!matcher_->can_continue() && !matcher_->can_end()) { finish(FinishReason::Stop, st); return st; }
            // Where the sampler cuts nothing (greedy, or no top-k/top-p/min-p),
            // drawing from all tokens and keeping an allowed draw is drawing
            // from the allowed ones: the whole mask is needed only when the
            // draw is refused (p(t) / p(allowed) either way).
            const SamplerParams& sp = opt_.sampling;
            if (sp.temperature <= 0 || (sp.top_k <= 0 && sp.top_p >= 1 && sp.min_p <= 0)) {
                const TokenId draw = sampler_.sample(work_);
                if (grammar_allows(draw)) t = draw;
                else fresh_work();
            }
            if (t < 0) tok.grammar_filter().apply(*matcher_, work_);
        }
        if (t < 0) t = sampler_.sample(work_);
    }
    if (top_logprobs_ >= 0) {
        st.logprob = float(double(s_.logits_[t]) - log_sum_exp(s_.logits_));
        st.top = Sampler::top_logprobs(s_.logits_, top_logprobs_);
    }
    if (!opt_.ignore_eos && tok.is_eog(t)) { finish(FinishReason::Stop, st); return st; }
    st.token = t;
    sampler_.accept(t);
    g_.tokens.push_back(t);
    if (opt_.grammar) follow_grammar(t);
    st.text = stops_.push(decoder_.push(t));
    if (stops_.stopped()) { finish(FinishReason::Stop, st); return st; }
    Backend& be = s_.backend_;
    std::vector<TokenId>& cached = s_.cached_;
    if (cached.size() >= be.n_ctx()) { finish(FinishReason::ContextFull, st); return st; }
    if (g_.tokens.size() >= max_tokens) { finish(FinishReason::Length, st); return st; }
    g_.text += st.text;
    const uint32_t pos = static_cast<uint32_t>(cached.size());
    if (argmax_only_) {
        if (!stream_tried_) {
            // The device may run greedy decoding ahead (the persistent
            // decoder): at most the tokens still allowed, stopping at an
            // end-of-generation id (this loop checks them too).
            stream_tried_ = true;
            const size_t left = max_tokens - g_.tokens.size();
            stream_ = be.start_greedy(t, pos, uint32_t(std::min<size_t>(left, UINT32_MAX)), s_.eog_);
        }
        std::optional<TokenId> n = stream_ ? stream_->next() : std::nullopt;
        if (!n) stream_.reset();   // none, or it stopped: evaluate here
        if (n) {
            next_ = *n;
        } else {
            be.eval_argmax_into(t, pos, &s_.argmax_);
            next_queued_ = true;
        }
    } else {
        be.eval(t, pos, s_.logits_.data());
    }
    cached.push_back(t);
    return st;
}

}  // namespace ptxlm
