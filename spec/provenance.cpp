#include "spec/provenance.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "sax_version.hpp"
#include "spec/utc.hpp"

namespace sax {

std::uint64_t text_hash(const std::string& text) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a's offset basis and prime (64 bits)
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string hash_text(const std::string& text) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(text_hash(text)));
  return buf;
}

std::string file_hash(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return hash_text(ss.str());
}

nlohmann::json provenance(const std::vector<std::pair<std::string, std::string>>& inputs) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [role, path] : inputs)
    if (!path.empty()) files[role] = {{"path", path}, {"hash", file_hash(path)}};
  return {{"sax_version", kVersion}, {"time_utc", utc_now()}, {"host", host}, {"inputs", files}};
}

std::string differing_inputs(const nlohmann::json& a, const nlohmann::json& b) {
  const auto* ia = a.is_object() && a.contains("inputs") ? &a["inputs"] : nullptr;
  const auto* ib = b.is_object() && b.contains("inputs") ? &b["inputs"] : nullptr;
  if (!ia || !ib || !ia->is_object() || !ib->is_object()) return "";
  auto text = [](const nlohmann::json* f) {
    return f ? f->value("path", "?") + " (" + f->value("hash", "?") + ")" : std::string("none");
  };
  std::string out;
  auto compare = [&](const std::string& role, const nlohmann::json* x, const nlohmann::json* y) {
    if (x && y && x->value("hash", "") == y->value("hash", "")) return;
    out += (out.empty() ? "" : "; ") + role + ": " + text(x) + " against " + text(y);
  };
  for (const auto& [role, x] : ia->items()) compare(role, &x, ib->contains(role) ? &(*ib)[role] : nullptr);
  for (const auto& [role, y] : ib->items())
    if (!ia->contains(role)) compare(role, nullptr, &y);
  return out;
}

}  // namespace sax
