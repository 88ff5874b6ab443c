// `sax check FILE...`: reads cluster, model and layout files (kind recognised from content),
// validates each, checks every layout against every cluster × model given, prints a summary.
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/format.hpp"
#include "spec/document.hpp"

namespace sax::cli {

namespace {

struct CheckArgs {
  std::vector<std::string> files;
};

void print_cluster(const Cluster& c) {
  std::cout << "cluster " << c.name << " (backend " << to_string(c.backend) << ")\n";
  std::cout << "  buildings       ";
  for (std::size_t i = 0; i < c.buildings.size(); ++i)
    std::cout << (i ? ", " : "") << c.buildings[i].name << " × " << c.buildings[i].nodes << " nodes";
  std::cout << "\n  world size      " << c.world_size() << " (" << c.num_nodes() << " nodes × " << c.devices_per_node
            << " " << c.device.name << (c.uniform() ? "" : ", unless a building says otherwise") << ")\n";
  for (int b = 0; b < static_cast<int>(c.buildings.size()); ++b) {
    const Building& bl = c.buildings[static_cast<std::size_t>(b)];
    if (bl.device || bl.devices_per_node > 0)
      std::cout << "  building        " << bl.name << ": " << c.devices_per_node_of(b) << " × " << c.device_of(b).name
                << " per node\n";
    if (bl.compute_slowdown != 1.0)
      std::cout << "  building        " << bl.name << ": compute emulated " << bl.compute_slowdown
                << "x slower (sax run slows its ranks' compute ops; the explorer divides its device's peak and HBM "
                   "bandwidth)\n";
  }
  std::cout << "  peak TFLOP/s    ";
  bool first = true;
  for (const auto& [dt, t] : c.device.peak_tflops) {
    std::cout << (first ? "" : ", ") << to_string(dt) << " " << t;
    first = false;
  }
  std::cout << "; HBM " << c.device.hbm_gib << " GiB at " << c.device.hbm_bandwidth_gbps << " GB/s\n";
  for (LinkClass lc : kLinkClasses) {
    const Link& l = c.link(lc);
    std::cout << "  " << link_class_name(lc) << std::string(16 - std::string(link_class_name(lc)).size(), ' ')
              << l.bandwidth_gbps << " GB/s, " << l.latency_us << " µs, oversubscription " << l.oversubscription
              << "\n";
  }
  auto names = [&c](const std::vector<int>& bs) {
    std::string s;
    for (int b : bs) s += (s.empty() ? "" : ", ") + c.buildings[static_cast<std::size_t>(b)].name;
    return s;
  };
  for (const auto& l : c.building_links)
    std::cout << "  between         " << names(l.buildings) << ": " << l.link.bandwidth_gbps << " GB/s, "
              << l.link.latency_us << " µs, oversubscription " << l.link.oversubscription << "\n";
  for (const auto& t : c.network_technologies)
    std::cout << "  technology      " << t.name << ": " << t.link.bandwidth_gbps << " GB/s, " << t.link.latency_us
              << " µs, oversubscription " << t.link.oversubscription
              << (t.buildings.empty() ? "" : " (between " + names(t.buildings) + ")") << "\n";
}

void print_model(const Model& m) {
  std::cout << "model " << m.name << " (" << (m.is_moe() ? "MoE" : "dense") << ", " << to_string(m.dtype) << ")\n";
  std::cout << "  shape           " << m.num_layers << " layers, hidden " << m.hidden_size << ", ffn "
            << m.ffn_hidden_size << ", heads " << m.num_attention_heads << "/" << m.num_query_groups << " kv, seq "
            << m.seq_length << ", vocab " << m.vocab_size << "\n";
  if (m.multi_latent_attention)
    std::cout << "  attention       multi-head latent: query latent " << m.q_lora_rank << ", KV latent "
              << m.kv_lora_rank << ", query-key heads " << m.qk_head_dim << " + " << m.qk_pos_emb_head_dim
              << " RoPE, values " << m.v_head_dim << "\n";
  if (m.is_moe())
    std::cout << "  experts         " << m.num_experts << " (top-" << m.moe_router_topk << ", ffn "
              << m.moe_ffn_hidden_size << ") in " << m.num_moe_layers() << " of " << m.num_layers << " layers"
              << (m.moe_shared_expert_intermediate_size > 0
                      ? ", with a shared expert of ffn " + std::to_string(m.moe_shared_expert_intermediate_size)
                      : std::string())
              << "\n";
  std::cout << "  parameters      " << human_count(m.params_total()) << " total, " << human_count(m.params_active())
            << " active\n";
  std::cout << "  FLOPs           " << sci(m.training_flops_per_token()) << " per token (training), "
            << sci(m.training_flops_per_step()) << " per step of " << m.global_batch_size << " × " << m.seq_length
            << " tokens\n";
}

void print_layout(const Layout& l, const Model& m, const Cluster& c, const std::string& file) {
  const std::int64_t world = c.world_size();
  std::cout << "layout " << file << " on " << c.name << " with " << m.name << ": ok\n";
  std::cout << "  degrees         TP " << l.tensor_model_parallel_size << ", CP " << l.context_parallel_size << ", EP "
            << l.expert_model_parallel_size << ", PP " << l.pipeline_model_parallel_size << " (VPP "
            << l.virtual_pipeline_model_parallel_size << "), DP " << l.data_parallel_size(world)
            << " (derived from world size " << world << ")\n";
  std::cout << "  batch           micro-batch " << l.micro_batch_size << ", " << l.num_microbatches(m, world)
            << " micro-batches per step\n";
  std::cout << "  stages          ";
  auto layers = l.stage_layers(m);
  for (std::size_t s = 0; s < layers.size(); ++s) std::cout << (s ? " " : "") << layers[s];
  std::cout << " layers\n";
  std::cout << "  placement       " << l.order_string() << ", schedule " << to_string(l.schedule.pipeline)
            << ", DP sync " << to_string(l.schedule.dp_sync) << ", cross-building "
            << (l.schedule.network_technology.empty() ? "(cluster default)" : l.schedule.network_technology) << "\n";
}

void run_check(const CheckArgs& args) {
  std::vector<Document> docs;
  for (const auto& f : args.files) docs.push_back(load_document(f));
  std::vector<const Document*> clusters, models, layouts;
  for (const auto& d : docs) {
    if (d.kind == DocumentKind::cluster) clusters.push_back(&d);
    if (d.kind == DocumentKind::model) models.push_back(&d);
    if (d.kind == DocumentKind::layout) layouts.push_back(&d);
  }
  // Validate every layout against every cluster × model before printing anything.
  for (const auto* l : layouts)
    for (const auto* c : clusters)
      for (const auto* m : models)
        validate_layout(std::get<Layout>(l->value), std::get<Model>(m->value), std::get<Cluster>(c->value), l->file);

  for (const auto* c : clusters) print_cluster(std::get<Cluster>(c->value));
  for (const auto* m : models) print_model(std::get<Model>(m->value));
  for (const auto* l : layouts) {
    if (clusters.empty() || models.empty())
      std::cout << "layout " << l->file << ": fields ok (give a cluster and a model to check it against them)\n";
    for (const auto* c : clusters)
      for (const auto* m : models)
        print_layout(std::get<Layout>(l->value), std::get<Model>(m->value), std::get<Cluster>(c->value), l->file);
  }
  std::cout << "checked " << docs.size() << " file(s): " << clusters.size() << " cluster, " << models.size()
            << " model, " << layouts.size() << " layout — all valid\n";
}

}  // namespace

void add_check(CLI::App& app) {
  auto args = std::make_shared<CheckArgs>();
  CLI::App* cmd = app.add_subcommand("check", "Validate cluster, model and layout files and summarise them");
  cmd->add_option("files", args->files, "Cluster, model and layout JSON files (kind recognised from content)")
      ->required();
  cmd->callback([args] { run_check(*args); });
}

}  // namespace sax::cli
