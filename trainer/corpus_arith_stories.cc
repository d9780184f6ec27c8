// Arith-corpus families about a person's things and money: a story of changes, boxes, a
// purchase, savings and a comparison with a second person. Their draws from rng are part of
// the corpus's definition (see corpus_arith_detail.h).
#include <cstdint>
#include <string>

#include "trainer/corpus_arith_detail.h"

namespace updraft::corpus::detail::arith {

void story(Rng& rng, Sample& s, Work& w) {
  const Cast c = pick_cast(rng);
  const Thing& t = rng.pick(kThings);
  int v = rng.range(4, 30);
  std::string q = std::string(c.p->name) + " has " + num(v) + " " + t.many + ".";
  const int ops = rng.range(1, 3);
  bool allow_times = true, last_minus = false;
  for (int i = 0; i < ops; ++i)
    v = change(rng, c, t, v, allow_times, last_minus, w, q);
  s.prompt = q + have_question(rng, c, t, last_minus);
}

void boxes(Rng& rng, Sample& s, Work& w) {
  static constexpr const char* kBoxes[][2] = {{"box", "boxes"},  {"bag", "bags"},       {"jar", "jars"},
                                              {"pack", "packs"}, {"basket", "baskets"}, {"crate", "crates"},
                                              {"tin", "tins"}};
  const Cast c = pick_cast(rng);
  const Thing& t = rng.pick(kThings);
  const auto& box = rng.pick(kBoxes);
  const int a = rng.range(2, 9), b = rng.range(2, 12);
  std::string q;
  if (rng.chance(1, 2))
    q = std::string(c.p->name) + " has " + num(a) + " " + box[1] + " of " + t.many + ". Each " + box[0] + " holds " +
        num(b) + " " + t.many + ".";
  else
    q = std::string(c.p->name) + " buys " + num(a) + " " + box[1] + " of " + t.many + " with " + num(b) + " " + t.many +
        " in each.";
  int v = w.step(a, '*', b);
  const int ops = rng.range(0, 2);
  bool allow_times = false, last_minus = false;
  for (int i = 0; i < ops; ++i)
    v = change(rng, c, t, v, allow_times, last_minus, w, q);
  s.prompt = q + have_question(rng, c, t, last_minus);
}

void shop(Rng& rng, Sample& s, Work& w) {
  static constexpr const char* kShops[] = {"market", "store", "corner shop", "fair", "shop", "stall"};
  static constexpr const char* kExtras[] = {"bag", "ribbon", "card", "box", "basket", "map"};
  const Cast c = pick_cast(rng);
  const Thing& t = rng.pick(kThings);
  const int p = rng.range(2, 9), n = rng.range(2, 9);
  std::string q;
  if (rng.chance(1, 2))
    q = std::string("At the ") + rng.pick(kShops) + ", one " + t.one + " costs " + num(p) + " dollars. " + c.p->name +
        " buys " + num(n) + " " + t.many + ".";
  else
    q = std::string(c.p->name) + " buys " + num(n) + " " + t.many + " at the " + rng.pick(kShops) + " for " + num(p) +
        " dollars each.";
  int total = w.step(n, '*', p);
  const uint32_t form = rng.below(4);
  if (form == 1 || form == 3) {
    const int e = rng.range(2, 9);
    q += " " + capitalised(c.subj()) + " also buys a " + rng.pick(kExtras) + " for " + num(e) + " dollars.";
    total = w.step(total, '+', e);
  }
  if (form >= 2) {
    static constexpr int kNotes[] = {10, 20, 50, 100};
    int first = 0;
    while (kNotes[first] < total)
      ++first;
    const int note = kNotes[first + static_cast<int>(rng.below(static_cast<uint32_t>(4 - first)))];
    q += " " + capitalised(c.subj()) + " pays with a " + num(note) + " dollar bill. How much change does " + c.subj() +
         " get?";
    w.step(note, '-', total);
  } else {
    q += std::string(" How much does ") + c.p->name + (form == 1 ? " spend in total?" : " spend?");
  }
  s.prompt = q;
}

void savings(Rng& rng, Sample& s, Work& w) {
  static constexpr const char* kItems[] = {"book", "game", "kite", "backpack", "lamp", "puzzle", "scarf", "ball"};
  static constexpr const char* kPeriods[] = {"week", "month", "day"};
  const Cast c = pick_cast(rng);
  const char* period = rng.pick(kPeriods);
  const int a = rng.range(2, 15), n = rng.range(2, 10);
  const bool start = rng.chance(1, 3);
  const int d = start ? rng.range(5, 40) : 0;
  const int cost = rng.range(2, a * n);
  std::string q;
  if (start)
    q = std::string(c.p->name) + " has " + num(d) + " dollars. ";
  q += std::string(start ? capitalised(c.subj()) : std::string(c.p->name)) + " saves " + num(a) + " dollars every " +
       period + ". After " + num(n) + " " + period + "s, " + c.subj() + " spends " + num(cost) + " dollars on a " +
       rng.pick(kItems) + ". How many dollars does " + c.p->name + " have now?";
  int v = w.step(a, '*', n);
  if (start)
    v = w.step(v, '+', d);
  w.step(v, '-', cost);
  s.prompt = q;
}

void compare(Rng& rng, Sample& s, Work& w) {
  const Cast c = pick_cast(rng);
  const Thing& t = rng.pick(kThings);
  const int a = rng.range(3, 30);
  std::string q = std::string(c.p->name) + " has " + num(a) + " " + t.many + ". " + c.q->name + " has ";
  const uint32_t form = rng.below(3);
  int other;
  if (form == 0) {
    const int b = rng.range(2, 20);
    q += num(b) + " more " + t.many + " than " + c.p->name + ".";
    other = w.step(a, '+', b);
  } else if (form == 1) {
    const int b = rng.range(2, a - 1);
    q += num(b) + " fewer " + t.many + " than " + c.p->name + ".";
    other = w.step(a, '-', b);
  } else {
    const int m = rng.range(2, 4);
    q += num(m) + " times as many " + t.many + " as " + c.p->name + ".";
    other = w.step(a, '*', m);
  }
  if (rng.chance(1, 2)) {
    q += std::string(" How many ") + t.many + " do they have together?";
    w.step(a, '+', other);
  } else {
    q += std::string(" How many ") + t.many + " does " + c.q->name + " have?";
  }
  s.prompt = q;
}

}  // namespace updraft::corpus::detail::arith
