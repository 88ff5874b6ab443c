#include "spec/lengths.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>

#include "spec/error.hpp"
#include "spec/fields.hpp"
#include "spec/number_text.hpp"

namespace sax {

namespace {

// The most tokens a length may have: far beyond any model's sequence, so a typo is caught.
constexpr double kMaxTokens = 1 << 24;

const char* kForms =
    "fixed, uniform:min=A,max=B, lognormal:median=M,sigma=S[,max=X] or histogram:file=F, with pack=none|docs "
    "and seed=N";

[[noreturn]] void refuse(const std::string& flag, const std::string& what, const std::string& text) {
  throw UsageError(flag + ": " + what + " (expected " + kForms + "), got \"" + safe_text(text) + "\"");
}

double number_of(const std::string& flag, const std::string& key, const std::string& v, const std::string& text,
                 double lo, double hi) {
  std::size_t used = 0;
  double x = NAN;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (v.empty() || used != v.size() || !std::isfinite(x) || x < lo || x > hi)
    refuse(flag, key + " must be a number from " + num(lo) + " to " + num(hi), text);
  return x;
}

// The histogram file: {"lengths": [...], "weights": [...]}, as many of each, lengths whole tokens
// >= 1, weights >= 0 and not all 0.
void load_histogram(LengthSpec& s, const std::string& file) {
  const json doc = load_json_file(file);
  Fields f(doc, file, "");
  const json& lengths = f.array("lengths");
  const json& weights = f.array("weights");
  f.finish();
  if (lengths.empty() || lengths.size() != weights.size())
    throw InputError(file, "/weights",
                     "one weight per length (" + std::to_string(lengths.size()) + " lengths, at least one), got " +
                         std::to_string(weights.size()));
  double total = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const json &l = lengths[i], &w = weights[i];
    if (!l.is_number() || l.get<double>() < 1 || l.get<double>() > kMaxTokens ||
        l.get<double>() != std::floor(l.get<double>()))
      throw InputError(file, json_path("/lengths", i),
                       "a whole number of tokens from 1 to " + num(kMaxTokens) + ", got " + l.dump());
    if (!w.is_number() || !(w.get<double>() >= 0) || !std::isfinite(w.get<double>()))
      throw InputError(file, json_path("/weights", i), "a weight >= 0, got " + w.dump());
    s.lengths.push_back(l.get<double>());
    s.weights.push_back(w.get<double>());
    total += w.get<double>();
  }
  if (!(total > 0)) throw InputError(file, "/weights", "at least one weight above 0, got all 0");
}

}  // namespace

LengthSpec parse_lengths(const std::string& text, const std::string& flag) {
  LengthSpec s;
  s.text = text;
  const std::size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  std::map<std::string, std::string> kv;
  if (colon != std::string::npos) {
    std::string rest = text.substr(colon + 1);
    std::size_t at = 0;
    while (at <= rest.size()) {
      const std::size_t comma = std::min(rest.find(',', at), rest.size());
      const std::string item = rest.substr(at, comma - at);
      const std::size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0) refuse(flag, "\"" + item + "\" is not key=value", text);
      if (!kv.emplace(item.substr(0, eq), item.substr(eq + 1)).second)
        refuse(flag, item.substr(0, eq) + " given twice", text);
      at = comma + 1;
    }
  }
  auto take = [&](const std::string& key) -> std::optional<std::string> {
    auto it = kv.find(key);
    if (it == kv.end()) return std::nullopt;
    std::string v = it->second;
    kv.erase(it);
    return v;
  };
  if (auto pack = take("pack")) {
    if (*pack == "none")
      s.pack = LengthSpec::Pack::none;
    else if (*pack == "docs")
      s.pack = LengthSpec::Pack::docs;
    else
      refuse(flag, "pack must be none or docs", text);
  }
  if (auto seed = take("seed")) s.seed = static_cast<std::uint64_t>(number_of(flag, "seed", *seed, text, 0, 1e15));
  auto need = [&](const std::string& key, double lo, double hi) {
    auto v = take(key);
    if (!v) refuse(flag, kind + " needs " + key, text);
    return number_of(flag, key, *v, text, lo, hi);
  };
  if (kind == "fixed") {
    s.kind = LengthSpec::Kind::fixed;
  } else if (kind == "uniform") {
    s.kind = LengthSpec::Kind::uniform;
    s.min = std::round(need("min", 1, kMaxTokens));
    s.max = std::round(need("max", 1, kMaxTokens));
    if (s.max < s.min) refuse(flag, "uniform's max is below its min", text);
  } else if (kind == "lognormal") {
    s.kind = LengthSpec::Kind::lognormal;
    s.median = need("median", 1, kMaxTokens);
    s.sigma = need("sigma", 0, 10);
    if (auto max = take("max")) s.max = std::round(number_of(flag, "max", *max, text, 1, kMaxTokens));
  } else if (kind == "histogram") {
    s.kind = LengthSpec::Kind::histogram;
    auto file = take("file");
    if (!file || file->empty()) refuse(flag, "histogram needs file=F", text);
    load_histogram(s, *file);
  } else {
    refuse(flag, "unknown distribution \"" + kind + "\"", text);
  }
  if (!kv.empty()) refuse(flag, "unknown key " + kv.begin()->first + " for " + kind, text);
  return s;
}

std::vector<SequenceShare> draw_sequences(const LengthSpec& spec, std::int64_t n, std::int64_t seq_length,
                                          std::int64_t step) {
  const auto budget = static_cast<double>(seq_length);
  std::vector<SequenceShare> out(static_cast<std::size_t>(std::max<std::int64_t>(n, 0)));
  if (!spec.uneven()) return out;
  // One stream per step: the same batch on every rank, another each step.
  std::mt19937_64 rng(spec.seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(step));
  std::uniform_real_distribution<double> uniform(spec.min, spec.max + 1);
  std::lognormal_distribution<double> lognormal(std::log(std::max(spec.median, 1.0)), spec.sigma);
  std::discrete_distribution<std::size_t> pick(spec.weights.begin(), spec.weights.end());
  const double cap = spec.max > 0 ? std::min(spec.max, budget) : budget;
  auto length = [&] {
    double x = 0;
    switch (spec.kind) {
      case LengthSpec::Kind::uniform:
        x = std::floor(uniform(rng));
        break;
      case LengthSpec::Kind::lognormal:
        x = std::round(lognormal(rng));
        break;
      case LengthSpec::Kind::histogram:
        x = spec.lengths[pick(rng)];
        break;
      case LengthSpec::Kind::fixed:
        x = budget;
        break;
    }
    return std::clamp(x, 1.0, cap);
  };
  for (SequenceShare& q : out) {
    if (spec.pack == LengthSpec::Pack::none) {
      const double l = length() / budget;
      q = {l, l * l};
      continue;
    }
    // Documents until the budget is full, the last cut to what is left.
    double filled = 0, attention = 0;
    while (filled < budget) {
      const double l = std::min(length(), budget - filled);
      filled += l;
      attention += l * l;
    }
    q = {1, attention / (budget * budget)};
  }
  return out;
}

}  // namespace sax
