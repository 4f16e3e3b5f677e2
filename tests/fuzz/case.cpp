#include "case.hpp"

#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace hopattn::fuzz {
namespace {

using testing::decode_case::ScaleKind;
using testing::fwd_bwd::Layout;

// ---------------------------------------------------------------- value codecs
// One format/parse pair per field type; parse returns false on a malformed value.

template <typename T>
struct Names;  // the text names of an enum, in enumerator order

template <>
struct Names<DType> {
  static constexpr const char* v[] = {"bf16",     "fp16", "fp32",  "fp8_e4m3",
                                      "fp8_e5m2", "int8", "int32", "bool"};
};
template <>
struct Names<KVLayout> {
  static constexpr const char* v[] = {"NHD", "HND"};
};
template <>
struct Names<Layout> {
  static constexpr const char* v[] = {"dense", "varlen", "paged"};
};
template <>
struct Names<ScaleKind> {
  static constexpr const char* v[] = {"tensor", "head"};
};
template <>
struct Names<Family> {
  static constexpr const char* v[] = {"fwd", "bwd", "decode", "mla", "merge", "batch"};
};

template <typename E>
void format(std::ostream& os, E e, decltype(Names<E>::v)* = nullptr) {
  os << Names<E>::v[static_cast<int>(e)];
}
template <typename E>
bool parse(const std::string& s, E& e, decltype(Names<E>::v)* = nullptr) {
  for (size_t i = 0; i < std::size(Names<E>::v); ++i) {
    if (s == Names<E>::v[i]) {
      e = static_cast<E>(i);
      return true;
    }
  }
  return false;
}

bool parse_int(const std::string& s, long long& v) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtoll(s.c_str(), &end, 10);
  return errno == 0 && *end == '\0';
}

void format(std::ostream& os, int v) { os << v; }
void format(std::ostream& os, int64_t v) { os << v; }
void format(std::ostream& os, bool v) { os << (v ? 1 : 0); }
bool parse(const std::string& s, int& v) {
  long long x;
  if (!parse_int(s, x) || x < INT32_MIN || x > INT32_MAX) return false;
  v = static_cast<int>(x);
  return true;
}
bool parse(const std::string& s, int64_t& v) {
  long long x;
  if (!parse_int(s, x)) return false;
  v = x;
  return true;
}
bool parse(const std::string& s, bool& v) {
  if (s != "0" && s != "1") return false;
  v = s == "1";
  return true;
}

// Floats print with enough digits to read back to the same float (and doubles to the same
// double), so a replayed line is the case that failed, not a neighbour.
void format(std::ostream& os, float v) {
  std::ostringstream t;
  t.precision(9);
  t << v;
  os << t.str();
}
void format(std::ostream& os, double v) {
  std::ostringstream t;
  t.precision(17);
  t << v;
  os << t.str();
}
bool parse(const std::string& s, double& v) {
  if (s.empty()) return false;
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return *end == '\0';
}
bool parse(const std::string& s, float& v) {
  double d;
  if (!parse(s, d)) return false;
  v = static_cast<float>(d);
  return true;
}

void format(std::ostream& os, const std::optional<float>& v) {
  if (v) {
    format(os, *v);
  } else {
    os << "none";
  }
}
bool parse(const std::string& s, std::optional<float>& v) {
  if (s == "none") {
    v.reset();
    return true;
  }
  float f;
  if (!parse(s, f)) return false;
  v = f;
  return true;
}

void format(std::ostream& os, const Window& w) { os << w.left << ',' << w.right; }
bool parse(const std::string& s, Window& w) {
  const size_t comma = s.find(',');
  return comma != std::string::npos && parse(s.substr(0, comma), w.left) &&
         parse(s.substr(comma + 1), w.right);
}

// Lists: comma separated; "-" is the empty list (a request count of 0 is still a list).
template <typename T>
void format(std::ostream& os, const std::vector<T>& v) {
  if (v.empty()) os << '-';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
}
template <typename T>
bool parse(const std::string& s, std::vector<T>& v) {
  v.clear();
  if (s == "-") return true;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    T x;
    if (!parse(item, x)) return false;
    v.push_back(x);
  }
  return !v.empty();
}

// ---------------------------------------------------------------- the fields of each family

template <typename F>
void visit(AttnCase& a, F&& f) {
  f("layout", a.build.layout);
  f("hq", a.spec.hq);
  f("hkv", a.spec.hkv);
  f("dqk", a.spec.dqk);
  f("dv", a.spec.dv);
  f("q_lens", a.spec.q_lens);
  f("kv_lens", a.spec.kv_lens);
  f("dtype", a.spec.dtype);
  f("causal", a.opts.causal);
  f("window", a.opts.window);
  f("softcap", a.opts.softcap);
  f("sinks", a.spec.sinks);
  f("no_sink_head0", a.no_sink_head0);
  f("q_range", a.spec.q_range);
  f("scale", a.opts.scale);
  f("deterministic", a.opts.deterministic);
  f("page_size", a.build.page_size);
  f("kv_layout", a.build.kv_layout);
  f("csr", a.build.csr);
  f("strided", a.build.strided);
  f("reversed", a.build.reversed);
  f("pad_rows", a.build.pad_rows);
  f("packed_kv", a.build.packed_kv);
}

template <typename F>
void visit(DecodeFuzzCase& d, F&& f) {
  testing::decode_case::DecodeCase& c = d.c;
  f("batch", c.batch);
  f("beam_width", c.beam_width);
  f("shared_prefix", c.shared_prefix);
  f("q_len", c.q_len);
  f("kv_heads", c.kv_heads);
  f("group", c.group);
  f("head_dim", c.head_dim);
  f("kv_lens", c.kv_lens);
  f("kv_dtype", c.cache.dtype);
  f("q_dtype", c.q_dtype);
  f("scale_kind", c.scale_kind);
  f("page_size", c.cache.page_size);
  f("layout", c.cache.layout);
  f("csr", c.cache.csr);
  f("shuffle", c.cache.shuffle);
  f("extra_pages", c.cache.extra_pages);
  f("cache_pad", c.cache.pad);
  f("padded", c.padded);
  f("causal", c.causal);
  f("tree", c.tree);
  f("window", c.window);
  f("softcap", c.softcap);
  f("sinks", c.sinks);
  f("no_sink_head0", d.no_sink_head0);
  f("scale", c.scale);
  f("num_splits", d.num_splits);
}

template <typename F>
void visit(MlaFuzzCase& m, F&& f) {
  testing::mla_case::MlaCase& c = m.c;
  f("q_lens", c.q_lens);
  f("kv_lens", c.kv_lens);
  f("heads", c.heads);
  f("page_size", c.page_size);
  f("csr", c.csr);
  f("causal", c.causal);
  f("q_dtype", c.q_dtype);
  f("kv_dtype", c.kv_dtype);
  f("kv_scale", c.kv_scale);
  f("scale", c.scale);
  f("pad", c.pad);
  f("num_splits", m.num_splits);
}

template <typename F>
void visit(MergeCase& m, F&& f) {
  f("n", m.n);
  f("n_way", m.n_way);
  f("tokens", m.tokens);
  f("heads", m.heads);
  f("dim", m.dim);
  f("dtype", m.dtype);
  f("out_dtype", m.out_dtype);
  f("empty_percent", m.empty_percent);
  f("lse_center", m.lse_center);
  f("lse_spread", m.lse_spread);
  f("pad", m.pad);
}

template <typename F>
void visit(BatchFuzzCase& b, F&& f) {
  testing::batch_case::BatchCase& c = b.c;
  f("q_lens", c.q_lens);
  f("kv_lens", c.kv_lens);
  f("kv_heads", c.kv_heads);
  f("group", c.group);
  f("head_dim", c.head_dim);
  f("head_dim_v", c.head_dim_v);
  f("page_size", c.page_size);
  f("layout", c.layout);
  f("q_dtype", c.q_dtype);
  f("kv_dtype", c.cache_dtype);
  f("per_head_scales", c.per_head_scales);
  f("causal", c.causal);
  f("window", c.window);
  f("softcap", c.softcap);
  f("scale", c.scale);
  f("sinks", c.sinks);
  f("num_ctas", c.num_ctas);
  f("max_batch", c.max_batch);
  f("max_tokens", c.max_tokens);
  f("pad_rows", c.pad_rows);
  f("cache_pad", c.cache_pad);
}

template <typename F>
void visit_family(Case& c, F&& f) {
  switch (c.family) {
    case Family::kFwd:
    case Family::kBwd:
      return visit(c.attn, f);
    case Family::kDecode:
      return visit(c.decode, f);
    case Family::kMla:
      return visit(c.mla, f);
    case Family::kMerge:
      return visit(c.merge, f);
    case Family::kBatch:
      return visit(c.batch, f);
  }
}

}  // namespace

const char* family_name(Family f) { return Names<Family>::v[static_cast<int>(f)]; }

std::string describe(const Case& c) {
  std::ostringstream os;
  os << family_name(c.family) << " seed=" << c.seed;
  Case copy = c;  // the visitor hands out references; describing changes nothing
  visit_family(copy, [&](const char* name, const auto& value) {
    os << ' ' << name << '=';
    format(os, value);
  });
  if (!c.corrupt.empty()) os << " corrupt=" << c.corrupt;
  return os.str();
}

Case parse(const std::string& line) {
  std::istringstream is(line);
  std::string word;
  if (!(is >> word)) throw std::invalid_argument("empty case line");
  Case c;
  if (!parse(word, c.family)) throw std::invalid_argument("unknown family '" + word + "'");
  while (is >> word) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("expected key=value, got " + word);
    const std::string key = word.substr(0, eq), value = word.substr(eq + 1);
    bool found = false, ok = true;
    if (key == "seed") {
      found = true;
      char* end = nullptr;
      c.seed = std::strtoull(value.c_str(), &end, 10);
      ok = !value.empty() && *end == '\0';
    } else if (key == "corrupt") {
      found = true;
      c.corrupt = value;
    }
    visit_family(c, [&](const char* name, auto& field) {
      if (key != name) return;
      found = true;
      ok = parse(value, field);
    });
    if (!found)
      throw std::invalid_argument("unknown key '" + key + "' for " + family_name(c.family));
    if (!ok) throw std::invalid_argument("bad value in " + word);
  }
  return c;
}

}  // namespace hopattn::fuzz
