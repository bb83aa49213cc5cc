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
    cached_.resize(keep);
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
    if (cached_.empty()) throw std::logic_error("Session::generate before prefill");
    validate(opt.sampling);
    Generation g;
    g.timings = last_prompt_;
    Sampler sampler(opt.sampling, static_cast<int32_t>(logits_.size()));
    const size_t window = opt.sampling.penalty_last_n > 0 ? size_t(opt.sampling.penalty_last_n) : 0;
    for (size_t i = cached_.size() > window ? cached_.size() - window : 0; i < cached_.size(); ++i)
        sampler.accept(cached_[i]);
    StreamDecoder decoder(tok_);
    StopMatcher stops(opt.stop);
    std::vector<float> work(logits_.size());
    auto emit = [&](const std::string& s) {
        if (s.empty()) return;
        g.text += s;
        if (on_text) on_text(s);
    };

    // Plain greedy decoding needs only the argmax of each step's logits,
    // which the backend may compute where the logits are (the GPU copies
    // back one id instead of the vocabulary's logits).
    const SamplerParams& sp = opt.sampling;
    const bool penalties = sp.penalty_last_n > 0 &&
                           (sp.repeat_penalty != 1.0f || sp.presence_penalty != 0.0f || sp.frequency_penalty != 0.0f);
    const bool argmax_only = sp.temperature <= 0 && !penalties && !opt.ignore_eos;
    std::optional<TokenId> next;   // the argmax of the current step, when the backend gave only that

    const auto t0 = std::chrono::steady_clock::now();
    g.finish = FinishReason::Length;
    for (;;) {
        if (cancel && cancel->load()) { g.finish = FinishReason::Cancelled; break; }
        if (opt.max_tokens >= 0 && g.tokens.size() >= size_t(opt.max_tokens)) { g.finish = FinishReason::Length; break; }
        TokenId t;
        if (next) {
            t = *next;
        } else {
            work.assign(logits_.begin(), logits_.end());
            if (opt.ignore_eos)
                for (TokenId id : eog_) work[id] = -INFINITY;
            t = sampler.sample(work);
        }
        if (!opt.ignore_eos && tok_.is_eog(t)) { g.finish = FinishReason::Stop; break; }
        sampler.accept(t);
        g.tokens.push_back(t);
        emit(stops.push(decoder.push(t)));
        if (stops.stopped()) { g.finish = FinishReason::Stop; break; }
        if (cached_.size() >= backend_.n_ctx()) { g.finish = FinishReason::ContextFull; break; }
        if (opt.max_tokens >= 0 && g.tokens.size() >= size_t(opt.max_tokens)) { g.finish = FinishReason::Length; break; }
        if (argmax_only) next = backend_.eval_argmax(t, static_cast<uint32_t>(cached_.size()));
        else backend_.eval(t, static_cast<uint32_t>(cached_.size()), logits_.data());
        cached_.push_back(t);
    }
    if (!stops.stopped()) emit(stops.push(decoder.flush()));
    if (!stops.stopped()) emit(stops.flush());
    g.timings.generated = static_cast<uint32_t>(g.tokens.size());
    g.timings.generate_ms = ms_since(t0);
    return g;
}

}  // namespace ptxlm
