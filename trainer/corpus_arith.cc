// The arith domain: word problems from ten template families, each with a worked solution of
// one to three operations (+, -, *) on small non-negative integers. Every operand of a step is a
// number written in the question (or the factor of "doubles"/"triples") or an earlier result.
//
// The families are in corpus_arith_stories.cc and corpus_arith_scenes.cc (shared internals in
// corpus_arith_detail.h); this file keeps the sentence helpers, the families' names and their
// registry, whose order fixes the family of every sample, and the public entry points.
#include <cstdint>
#include <string>

#include "kernels/core/error.h"
#include "trainer/corpus_arith_detail.h"
#include "trainer/corpus_detail.h"

namespace updraft::corpus::detail {

namespace arith {

std::string num(int v) {
  return std::to_string(v);
}
std::string years(int v) {
  return num(v) + (v == 1 ? " year" : " years");
}
const char* article(const char* noun) {
  return noun[0] == 'a' || noun[0] == 'e' || noun[0] == 'i' || noun[0] == 'o' || noun[0] == 'u' ? "an " : "a ";
}

Cast pick_cast(Rng& rng) {
  constexpr uint32_t n = sizeof(kPeople) / sizeof(kPeople[0]);
  const uint32_t a = rng.below(n);
  const uint32_t b = (a + 1 + rng.below(n - 1)) % n;
  return {&kPeople[a], &kPeople[b]};
}

std::string capitalised(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z')
    s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}

// A sentence after the first: optionally led by a connector, capitalised either way.
std::string later(Rng& rng, const std::string& body) {
  static constexpr const char* kLeads[] = {"", "Then ", "After that, ", "Later, "};
  const char* lead = rng.pick(kLeads);
  return " " + (lead[0] == '\0' ? capitalised(body) : lead + body);
}

// One change to the person's count v; appends the sentence and the step, returns the new count.
// `allow_times` permits one multiplication; `last_minus` reports whether it took some away.
int change(Rng& rng, const Cast& c, const Thing& t, int v, bool& allow_times, bool& last_minus, Work& w,
           std::string& q) {
  const std::string s = c.subj(), name = c.q->name;
  uint32_t kind = rng.below(10);
  if (kind >= 8 && !(allow_times && v >= 1 && v <= 60))
    kind = rng.below(8);
  if (kind >= 4 && kind < 8 && v < 2)
    kind = 0;
  last_minus = kind >= 4 && kind < 8;
  if (kind < 4) {
    const int a = rng.range(2, 15);
    static constexpr const char* kPlus[] = {"buys", "finds", "collects", "wins", "receives", "", ""};
    const uint32_t form = rng.below(7);
    std::string body;
    if (form == 5)
      body = name + " gives " + c.obj() + " " + num(a) + " more.";
    else if (form == 6)
      body = s + " gets " + num(a) + " more from " + name + ".";
    else
      body = s + " " + kPlus[form] + " " + num(a) + " more.";
    q += later(rng, body);
    return w.step(v, '+', a);
  }
  if (kind < 8) {
    const int a = rng.range(1, v < 20 ? v : 20);
    static constexpr const char* kMinus[] = {"loses", "sells", "", "", "", ""};
    const uint32_t form = rng.below(6);
    std::string body;
    if (form == 2)
      body = s + " gives " + num(a) + " to " + name + ".";
    else if (form == 3)
      body = s + " " + t.use + " " + num(a) + ".";
    else if (form == 4)
      body = s + " gives " + num(a) + " away.";
    else if (form == 5)
      body = name + " takes " + num(a) + " of them.";
    else
      body = s + " " + kMinus[form] + " " + num(a) + ".";
    q += later(rng, body);
    return w.step(v, '-', a);
  }
  allow_times = false;
  const uint32_t form = rng.below(3);
  const int m = form == 0 ? 2 : form == 1 ? 3 : rng.range(2, 4);
  if (form == 2)
    q += later(rng, s + " ends up with " + num(m) + " times as many " + t.many + " as before.");
  else
    q += later(rng, std::string(c.poss()) + " number of " + t.many + (m == 2 ? " doubles." : " triples."));
  return w.step(v, '*', m);
}

std::string have_question(Rng& rng, const Cast& c, const Thing& t, bool last_minus) {
  const uint32_t form = rng.below(last_minus ? 3 : 2);
  static constexpr const char* kTail[] = {" have now?", " have in the end?", " have left?"};
  return std::string(" How many ") + t.many + " does " + c.p->name + kTail[form];
}

}  // namespace arith

using arith::ages;
using arith::boxes;
using arith::compare;
using arith::level;
using arith::rate;
using arith::rows;
using arith::savings;
using arith::shop;
using arith::story;
using arith::vehicle;
using arith::Work;

namespace {

constexpr const char* kArithFamilies[] = {"story",   "boxes",   "shop", "rate",  "savings",
                                          "vehicle", "compare", "rows", "level", "ages"};
constexpr int kNumArithFamilies = static_cast<int>(sizeof(kArithFamilies) / sizeof(kArithFamilies[0]));

}  // namespace

int arith_family_count() {
  return kNumArithFamilies;
}

std::string_view arith_family_name(int family) {
  UPD_CHECK(family >= 0 && family < kNumArithFamilies) << "arith family " << family;
  return kArithFamilies[family];
}

Sample make_arith(Rng& rng) {
  using Builder = void (*)(Rng&, Sample&, Work&);
  static constexpr Builder kBuilders[] = {story, boxes, shop, rate, savings, vehicle, compare, rows, level, ages};
  static_assert(sizeof(kBuilders) / sizeof(kBuilders[0]) == kNumArithFamilies);
  Sample s;
  s.domain = Domain::kArith;
  s.family = static_cast<int>(rng.below(kNumArithFamilies));
  Work w;
  kBuilders[s.family](rng, s, w);
  s.prompt = "Question: " + s.prompt + "\nAnswer:";
  w.finish(s);
  return s;
}

}  // namespace updraft::corpus::detail
