#include "spec/pipeline_layout.hpp"

#include <cctype>

namespace sax {

namespace {

// No layout has more than this many items once unrolled (a bound against "t*99999999999").
constexpr std::size_t kMaxItems = 1u << 20;

// "*N" at s[i]: N, and where the digits end; false where s[i] does not start "*<digits>".
bool repeat_at(const std::string& s, std::size_t i, std::size_t& n, std::size_t& end) {
  if (i + 1 >= s.size() || s[i] != '*' || !std::isdigit(static_cast<unsigned char>(s[i + 1]))) return false;
  n = 0;
  end = i + 1;
  for (; end < s.size() && std::isdigit(static_cast<unsigned char>(s[end])); ++end)
    n = std::min<std::size_t>(n * 10 + static_cast<std::size_t>(s[end] - '0'), kMaxItems + 1);
  return true;
}

// One left-to-right pass of Python's re.sub for Megatron's two patterns: groups
// r'\(([^)]+)\)\*(\d+)' (group = true), then single characters r'(.)\*(\d+)'.
bool unroll(const std::string& s, bool group, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < s.size();) {
    std::size_t body = i, len = 1, n = 0, end = 0;
    if (group) {
      const std::size_t close = s[i] == '(' ? s.find(')', i + 1) : std::string::npos;
      body = i + 1;
      len = close == std::string::npos ? 0 : close - body;
      if (len == 0 || !repeat_at(s, close + 1, n, end)) len = 0;
    } else if (!repeat_at(s, i + 1, n, end)) {
      len = 0;
    }
    if (len == 0) {
      out += s[i++];
      continue;
    }
    if (n > kMaxItems || out.size() + n * len > kMaxItems) return false;
    for (std::size_t k = 0; k < n; ++k) out.append(s, body, len);
    i = end;
  }
  return true;
}

}  // namespace

ParsedPipelineLayout parse_pipeline_layout(const std::string& layout) {
  ParsedPipelineLayout p;
  const std::string quoted = "\"" + layout + "\"";
  std::string s, a, b;
  for (char ch : layout)
    if (ch != ',') s += ch;  // commas are cosmetic
  if (!unroll(s, true, a) || !unroll(a, false, b)) {
    p.error = "a layout of at most " + std::to_string(kMaxItems) + " items once unrolled, got " + quoted;
    return p;
  }
  p.stages.emplace_back();
  std::int64_t embeddings = 0, losses = 0, mtp = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    VirtualStageContents& st = p.stages.back();
    const bool stage_start = i == 0 || b[i - 1] == '|', stage_end = i + 1 == b.size() || b[i + 1] == '|';
    switch (b[i]) {
      case '|':
        p.stages.emplace_back();
        break;
      case 't':
        ++st.decoder;
        break;
      case 'm':
        ++st.mtp;
        ++mtp;
        break;
      case 'E':
        ++st.embedding;
        ++embeddings;
        st.embedding_first = stage_start;
        break;
      case 'L':
        ++st.loss;
        ++losses;
        st.loss_last = stage_end;
        break;
      default:
        p.error = std::string("Megatron's layout syntax: virtual stages of E (embedding), t (transformer layer), ") +
                  "L (loss) and m (MTP) separated by '|', with x*N, (…)*N and ',', got '" + b[i] + "' in " + quoted;
        return p;
    }
  }
  if (mtp > 0) {
    p.error = "no 'm': sax models no multi-token-prediction (MTP) layers, got " + std::to_string(mtp) + " in " + quoted;
  } else if (embeddings != 1 || losses != 1) {
    p.error = "exactly one E (embedding) and one L (loss), as Megatron asks, got " + std::to_string(embeddings) +
              " E and " + std::to_string(losses) + " L in " + quoted;
  } else if (p.stages.front().embedding != 1 || !p.stages.front().embedding_first) {
    p.error = "E first in the first virtual stage (where Megatron builds the embedding), got " + quoted;
  } else if (p.stages.back().loss != 1 || !p.stages.back().loss_last) {
    p.error = "L last in the last virtual stage (where Megatron builds the output layer and loss), got " + quoted;
  }
  return p;
}

}  // namespace sax
