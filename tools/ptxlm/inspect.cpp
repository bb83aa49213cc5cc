// `ptxlm inspect MODEL [--json]`: what a GGUF file holds.
//
// The description is built once as JSON; the human view renders that same
// object, so `--json` and the table can never disagree.
#include <cinttypes>
#include <cstdio>
#include <map>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/hparams.h"
#include "gguf/gguf.h"
#include "tools/ptxlm/commands.h"

namespace ptxlm::cli {
namespace {

using nlohmann::json;

json per_layer(const HParams& h, const std::vector<uint32_t>& v) {
    if (h.uniform(v)) return v.empty() ? json(nullptr) : json(v[0]);
    return json(v);
}

json describe(const gguf::File& f) {
    json j;
    j["file"] = f.path();
    j["file_bytes"] = f.file_size();
    j["gguf_version"] = f.version();
    j["alignment"] = f.alignment();
    j["metadata_keys"] = f.metadata().size();

    const HParams h = read_hparams(f);
    j["architecture"] = h.arch;
    j["name"] = h.name;
    j["supported"] = h.supported;
    j["file_type"] = h.file_type ? json(file_type_name(h.file_type)) : json(nullptr);

    json hp;
    hp["n_layer"] = h.n_layer;
    hp["n_embd"] = h.n_embd;
    hp["n_head"] = per_layer(h, h.n_head);
    hp["n_head_kv"] = per_layer(h, h.n_head_kv);
    hp["head_dim_k"] = h.head_dim_k;
    hp["head_dim_v"] = h.head_dim_v;
    hp["n_ff"] = per_layer(h, h.n_ff);
    hp["n_ctx_train"] = h.n_ctx_train;
    hp["rms_eps"] = h.rms_eps;
    hp["rope_base"] = h.rope_base;
    hp["rope_base_local"] = h.rope_base_local ? json(*h.rope_base_local) : json(nullptr);
    hp["rope_dims"] = h.n_rot;
    hp["rope_style"] = h.rope_style == RopeStyle::Neox ? "neox" : "adjacent";
    hp["sliding_window"] = h.sliding_window;
    hp["rope_scaling"] = h.rope_scaling.empty() ? json(nullptr) : json(h.rope_scaling);
    hp["rope_scaling_factor"] = h.rope_scaling_factor > 0 ? json(h.rope_scaling_factor) : json(nullptr);
    hp["rope_orig_ctx"] = h.rope_orig_ctx;   // YaRN's original context (context_length when not given)
    hp["attn_temperature_scale"] = h.attn_temp_scale != 0 ? json(h.attn_temp_scale) : json(nullptr);
    hp["rope_attn_factor"] = h.rope_attn_factor != 1.0f ? json(h.rope_attn_factor) : json(nullptr);
    // Phi-3/Phi-4's LongRoPE factor sets (tensors), and phi3's window, which
    // llama.cpp and ptxlm do not apply.
    json longrope = json::array();
    for (const char* set : {"long", "short"})
        if (f.find_tensor(std::string("rope_factors_") + set + ".weight")) longrope.push_back(set);
    hp["rope_factors"] = longrope;
    hp["sliding_window_unused"] = h.arch == "phi3" ? f.get_u32(h.arch + ".attention.sliding_window").value_or(0) : 0;
    // Gemma 4: which layers slide (sliding_window_pattern), their head size
    // and rotary dims, the shared-KV layers, the per-layer embedding width.
    json sliding = json::array();
    for (uint32_t il = 0; il < h.swa_layers.size(); ++il)
        if (h.swa_layers[il]) sliding.push_back(il);
    hp["sliding_layers"] = h.swa_layers.empty() ? json(nullptr) : sliding;
    hp["head_dim_k_swa"] = h.head_dim_k_swa ? json(h.head_dim_k_swa) : json(nullptr);
    hp["head_dim_v_swa"] = h.head_dim_v_swa ? json(h.head_dim_v_swa) : json(nullptr);
    hp["rope_dims_swa"] = h.arch == "gemma4" ? json(h.n_rot_swa) : json(nullptr);
    hp["shared_kv_layers"] = h.shared_kv_layers;
    hp["n_embd_per_layer"] = h.n_embd_per_layer;
    const auto softcap = f.get_float(h.arch + ".final_logit_softcapping");
    hp["final_logit_softcapping"] = softcap ? json(*softcap) : json(nullptr);
    j["hparams"] = hp;

    json tok;
    tok["model"] = h.tokenizer_model;
    tok["pre"] = h.tokenizer_pre;
    tok["n_vocab"] = h.n_vocab;
    tok["bos_id"] = h.bos_id ? json(*h.bos_id) : json(nullptr);
    tok["eos_id"] = h.eos_id ? json(*h.eos_id) : json(nullptr);
    tok["eot_id"] = h.eot_id ? json(*h.eot_id) : json(nullptr);
    tok["add_bos"] = h.add_bos ? json(*h.add_bos) : json(nullptr);
    j["tokenizer"] = tok;
    j["chat_template"] = h.has_chat_template;

    json tensors = json::array();
    struct Total { uint64_t count = 0, elements = 0, bytes = 0; };
    std::map<std::string, Total> totals;
    uint64_t all_bytes = 0, all_elements = 0;
    for (const gguf::TensorInfo& t : f.tensors()) {
        std::string type = gguf::type_name(t.type);
        json shape = json::array();
        for (uint32_t d = 0; d < t.n_dims; ++d) shape.push_back(t.ne[d]);
        tensors.push_back({{"name", t.name}, {"type", type}, {"shape", shape}, {"bytes", t.n_bytes}});
        Total& tot = totals[type];
        tot.count += 1;
        tot.elements += t.n_elements();
        tot.bytes += t.n_bytes;
        all_bytes += t.n_bytes;
        all_elements += t.n_elements();
    }
    j["tensors"] = tensors;
    json tj = json::array();
    for (const auto& [type, tot] : totals)
        tj.push_back({{"type", type}, {"tensors", tot.count}, {"elements", tot.elements}, {"bytes", tot.bytes}});
    j["totals"] = tj;
    j["tensor_bytes"] = all_bytes;
    j["parameters"] = all_elements;
    return j;
}

std::string human_bytes(uint64_t b) {
    char buf[32];
    if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
    else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / double(1ull << 20));
    else if (b >= (1ull << 10)) std::snprintf(buf, sizeof buf, "%.1f KiB", b / double(1ull << 10));
    else std::snprintf(buf, sizeof buf, "%" PRIu64 " B", b);
    return buf;
}

std::string str(const json& v) {
    if (v.is_null()) return "-";
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_float()) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.7g", v.get<double>());
        return buf;
    }
    return v.dump();
}

std::string shape_str(const json& shape) {
    std::string s;
    for (const json& d : shape) s += (s.empty() ? "" : " x ") + d.dump();
    return s;
}

void print_human(const json& j) {
    const json& hp = j["hparams"];
    const json& tok = j["tokenizer"];
    auto row = [](const char* label, const std::string& value) {
        std::printf("  %-16s %s\n", label, value.c_str());
    };
    std::printf("%s\n", j["file"].get<std::string>().c_str());
    row("format", "GGUF v" + str(j["gguf_version"]) + ", " + human_bytes(j["file_bytes"]) + ", " +
                      str(j["metadata_keys"]) + " metadata keys, alignment " + str(j["alignment"]));
    row("name", str(j["name"]));
    row("architecture", str(j["architecture"]) + (j["supported"].get<bool>() ? "" : " (not supported for decoding)"));
    row("file type", str(j["file_type"]));
    char params[32];
    std::snprintf(params, sizeof params, "%.1f M", j["parameters"].get<double>() / 1e6);
    row("parameters", std::string(params) + " (" + human_bytes(j["tensor_bytes"]) + " of tensors)");
    row("layers", str(hp["n_layer"]));
    row("embedding", str(hp["n_embd"]));
    row("heads", str(hp["n_head"]) + " (KV heads " + str(hp["n_head_kv"]) + ")");
    row("head dim", str(hp["head_dim_k"]) + (hp["head_dim_v"] == hp["head_dim_k"] ? "" : " (v " + str(hp["head_dim_v"]) + ")") +
                        (hp["head_dim_k_swa"].is_null() ? "" : " (sliding layers " + str(hp["head_dim_k_swa"]) + ")"));
    row("feed-forward", str(hp["n_ff"]));
    row("context", str(hp["n_ctx_train"]) + " (trained)");
    std::string rope = "base " + str(hp["rope_base"]);
    if (!hp["rope_base_local"].is_null()) rope += " global, " + str(hp["rope_base_local"]) + " local";
    row("rope", rope + ", " + str(hp["rope_style"]) + ", " + str(hp["rope_dims"]) + " dims" +
                    (hp["rope_dims_swa"].is_null() ? "" : " (sliding layers " + str(hp["rope_dims_swa"]) + ")"));
    if (!hp["rope_scaling"].is_null() || !hp["rope_scaling_factor"].is_null())
        row("rope scaling", (hp["rope_scaling"].is_null() ? std::string("linear") : str(hp["rope_scaling"])) +
                                (hp["rope_scaling_factor"].is_null() ? "" : ", factor " + str(hp["rope_scaling_factor"])) +
                                (hp["rope_scaling"] == "yarn" ? ", original context " + str(hp["rope_orig_ctx"]) : ""));
    if (!hp["attn_temperature_scale"].is_null())
        row("attn temperature", "scale " + str(hp["attn_temperature_scale"]) + ", every " + str(hp["rope_orig_ctx"]) +
                                    " positions");
    if (!hp["rope_factors"].empty()) {
        std::string sets;
        for (const json& s : hp["rope_factors"]) sets += (sets.empty() ? "" : ", ") + s.get<std::string>();
        row("longrope", "factors " + sets + " (long past an original context of " + str(hp["rope_orig_ctx"]) + ")");
    }
    if (!hp["rope_attn_factor"].is_null()) row("rope magnitude", str(hp["rope_attn_factor"]) + " (rope.scaling.attn_factor)");
    row("sliding window", hp["sliding_window"] != 0 ? str(hp["sliding_window"])
                          : hp["sliding_window_unused"] != 0
                              ? "none (the file's " + str(hp["sliding_window_unused"]) + " is not applied, as in llama.cpp)"
                              : "none");
    if (!hp["sliding_layers"].is_null()) {
        std::string layers;
        for (const json& il : hp["sliding_layers"]) layers += (layers.empty() ? "" : " ") + il.dump();
        row("sliding layers", layers.empty() ? "none" : layers);
    }
    if (hp["shared_kv_layers"] != 0)
        row("shared kv", "the last " + str(hp["shared_kv_layers"]) + " layers attend over earlier layers' K/V");
    if (hp["n_embd_per_layer"] != 0) row("per-layer embd", str(hp["n_embd_per_layer"]) + " per layer and token");
    if (!hp["final_logit_softcapping"].is_null()) row("logit softcap", str(hp["final_logit_softcapping"]));
    row("rms eps", str(hp["rms_eps"]));
    std::string t = str(tok["model"]);
    if (tok["model"] == "llama") t += " (SentencePiece)";
    else if (tok["model"] == "gpt2") t += " (byte-level BPE)";
    else if (tok["model"] == "gemma4") t += " (SentencePiece-style BPE)";
    row("tokenizer", t + ", pre " + str(tok["pre"]) + ", " + str(tok["n_vocab"]) + " tokens");
    row("special tokens", "bos " + str(tok["bos_id"]) + ", eos " + str(tok["eos_id"]) + ", eot " + str(tok["eot_id"]) +
                              ", add bos " + str(tok["add_bos"]));
    row("chat template", j["chat_template"].get<bool>() ? "present" : "absent");

    std::printf("\n  %-36s %-6s %-22s %12s\n", "tensor", "type", "shape", "bytes");
    for (const json& tj : j["tensors"])
        std::printf("  %-36s %-6s %-22s %12s\n", tj["name"].get<std::string>().c_str(), tj["type"].get<std::string>().c_str(),
                    shape_str(tj["shape"]).c_str(), tj["bytes"].dump().c_str());
    std::printf("\n  %-6s %8s %14s %12s %7s\n", "type", "tensors", "elements", "bytes", "share");
    const double total = std::max<double>(1.0, j["tensor_bytes"].get<double>());
    for (const json& tt : j["totals"])
        std::printf("  %-6s %8s %14s %12s %6.1f%%\n", tt["type"].get<std::string>().c_str(), tt["tensors"].dump().c_str(),
                    tt["elements"].dump().c_str(), human_bytes(tt["bytes"]).c_str(), 100.0 * tt["bytes"].get<double>() / total);
}

}  // namespace

Runner add_inspect(CLI::App& app) {
    CLI::App* sub = app.add_subcommand("inspect", "Describe a GGUF model: hyperparameters, tokenizer, tensors");
    auto path = std::make_shared<std::string>();
    auto as_json = std::make_shared<bool>(false);
    sub->add_option("model", *path, "GGUF file")->required();
    sub->add_flag("--json", *as_json, "Print the description as one JSON object");
    return [path, as_json]() -> int {
        json j;
        try {
            gguf::File f = gguf::File::open(*path);
            j = describe(f);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "ptxlm inspect: %s\n", e.what());
            return 2;
        }
        if (*as_json) std::printf("%s\n", j.dump(2).c_str());
        else print_human(j);
        return 0;
    };
}

}  // namespace ptxlm::cli
