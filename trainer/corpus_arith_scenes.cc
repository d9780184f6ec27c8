// Arith-corpus families about work over time, a vehicle's riders, rows of a place, a gauge
// that rises and falls, and ages. Their draws from rng are part of the corpus's definition
// (see corpus_arith_detail.h).
#include <cstdint>
#include <string>

#include "trainer/corpus_arith_detail.h"

namespace updraft::corpus::detail::arith {

void rate(Rng& rng, Sample& s, Work& w) {
  struct Job {
    const char *intro, *units, *verb, *past, *base, *period;
  };
  static constexpr Job kJobs[] = {
      {"A book has", "pages", "reads", "read", "read", "day"},
      {"A puzzle has", "pieces", "places", "placed", "place", "hour"},
      {"A fence has", "boards", "paints", "painted", "paint", "day"},
      {"A wall needs", "bricks", "lays", "laid", "lay", "hour"},
      {"A quilt needs", "squares", "sews", "sewn", "sew", "evening"},
      {"A photo album has", "pages", "fills", "filled", "fill", "week"},
      {"A garden needs", "plants", "plants", "planted", "plant", "day"},
  };
  const Cast c = pick_cast(rng);
  const Job& j = rng.pick(kJobs);
  const int b = rng.range(2, 12), n = rng.range(2, 9);
  const bool before = rng.chance(1, 3);
  const int d = before ? rng.range(2, 20) : 0;
  const int a = b * n + d + rng.range(0, 60);
  std::string q = std::string(j.intro) + " " + num(a) + " " + j.units + ". " + c.p->name + " " + j.verb + " " + num(b) +
                  " " + j.units + " each " + j.period + " for " + num(n) + " " + j.period + "s.";
  if (before)
    q += std::string(" Before that, ") + c.subj() + " had already " + j.past + " " + num(d) + " " + j.units + ".";
  q += rng.chance(1, 2) ? std::string(" How many ") + j.units + " are left?"
                        : std::string(" How many ") + j.units + " does " + c.p->name + " still have to " + j.base + "?";
  const int x = w.step(b, '*', n);
  const int y = w.step(a, '-', x);
  if (before)
    w.step(y, '-', d);
  s.prompt = q;
}

void vehicle(Rng& rng, Sample& s, Work& w) {
  static constexpr const char* kVehicles[] = {"bus", "train", "tram", "ferry", "boat"};
  static constexpr const char* kRiders[] = {"passengers", "people"};
  const char* vehicle = rng.pick(kVehicles);
  const char* riders = rng.pick(kRiders);
  int v = rng.range(10, 50);
  std::string q = std::string("A ") + vehicle + " has " + num(v) + " " + riders + " on board.";
  const int ops = rng.range(1, 3);
  auto move = [&](bool off) {
    const int k = off ? rng.range(1, v < 15 ? v : 15) : rng.range(1, 15);
    v = w.step(v, off ? '-' : '+', k);
    return num(k) + (off ? " get off" : " get on");
  };
  if (ops == 1) {
    q += " At the first stop, " + move(rng.chance(1, 2)) + ".";
  } else {
    const std::string off = move(true);
    q += " At the first stop, " + off + " and " + move(false) + ".";
    if (ops == 3)
      q += " At the second stop, " + move(rng.chance(1, 2)) + ".";
  }
  q += std::string(" How many ") + riders + " are on the " + vehicle + " now?";
  s.prompt = q;
}

void rows(Rng& rng, Sample& s, Work& w) {
  struct Place {
    const char *place, *things, *remove, *add;
  };
  static constexpr Place kPlaces[] = {
      {"garden", "tulips", "picks", "plants"},     {"hall", "chairs", "takes away", "sets out"},
      {"orchard", "trees", "cuts down", "plants"}, {"classroom", "desks", "removes", "brings in"},
      {"field", "cabbages", "harvests", "plants"}, {"parking lot", "cars", "drives away", "parks"},
      {"library", "shelves", "removes", "builds"},
  };
  const Cast c = pick_cast(rng);
  const Place& p = rng.pick(kPlaces);
  const int a = rng.range(2, 9), b = rng.range(3, 12);
  std::string q = std::string(capitalised(article(p.place))) + p.place + " has " + num(a) + " rows with " + num(b) +
                  " " + p.things + " in each row.";
  int v = w.step(a, '*', b);
  const uint32_t form = rng.below(3);
  if (form != 1) {
    const int k = rng.range(2, v < 20 ? v : 20);
    q += std::string(" ") + c.p->name + " " + p.remove + " " + num(k) + " " + p.things + ".";
    v = w.step(v, '-', k);
  }
  if (form != 0) {
    const int k = rng.range(1, 15);
    q += form == 1 ? std::string(" ") + c.p->name + " " + p.add + " " + num(k) + " more."
                   : later(rng, std::string(c.subj()) + " " + p.add + " " + num(k) + " more.");
    v = w.step(v, '+', k);
  }
  q += std::string(" How many ") + p.things + " are in the " + p.place + " now?";
  s.prompt = q;
}

void level(Rng& rng, Sample& s, Work& w) {
  struct Gauge {
    const char *start, *up_pre, *up_post, *down_pre, *down_post, *question;
  };
  static constexpr Gauge kGauges[] = {
      {"In the morning the temperature is # degrees.", "it gets ", " degrees warmer", "it gets ", " degrees colder",
       "What is the temperature now?"},
      {"A tank holds # liters of water.", "", " liters are poured in", "", " liters are drained",
       "How many liters are in the tank now?"},
      {"A kite flies # meters high.", "it rises ", " meters", "it drops ", " meters", "How high is the kite now?"},
      {"A team has # points.", "it scores ", " points", "it loses ", " points",
       "How many points does the team have now?"},
      {"A lift is on floor #.", "it goes up ", " floors", "it goes down ", " floors",
       "Which floor is the lift on now?"},
  };
  const Gauge& g = rng.pick(kGauges);
  int v = rng.range(5, 40);
  const std::string start = g.start;
  const size_t hash = start.find('#');
  std::string q = start.substr(0, hash) + num(v) + start.substr(hash + 1);
  const int ops = rng.range(1, 3);
  for (int i = 0; i < ops; ++i) {
    const bool down = v >= 2 && rng.chance(1, 2);
    const int k = down ? rng.range(2, v < 20 ? v : 20) : rng.range(2, 20);
    q += later(rng, std::string(down ? g.down_pre : g.up_pre) + num(k) + (down ? g.down_post : g.up_post) + ".");
    v = w.step(v, down ? '-' : '+', k);
  }
  s.prompt = q + " " + g.question;
}

void ages(Rng& rng, Sample& s, Work& w) {
  const Cast c = pick_cast(rng);
  const int a = rng.range(5, 40);
  const bool older = rng.chance(1, 2);
  const int b = rng.range(1, older ? 15 : (a - 1 < 15 ? a - 1 : 15));
  std::string q = std::string(c.p->name) + " is " + num(a) + " years old. " + c.q->name + " is " + years(b) +
                  (older ? " older" : " younger") + " than " + c.p->name + ".";
  const int age = w.step(a, older ? '+' : '-', b);
  const uint32_t form = rng.below(3);
  if (form == 0) {
    q += std::string(" How old is ") + c.q->name + "?";
  } else if (form == 1) {
    const int k = rng.range(1, 20);
    q += std::string(" How old will ") + c.q->name + " be in " + years(k) + "?";
    w.step(age, '+', k);
  } else {
    const int k = rng.range(1, age);
    q += std::string(" How old was ") + c.q->name + " " + years(k) + " ago?";
    w.step(age, '-', k);
  }
  s.prompt = q;
}

}  // namespace updraft::corpus::detail::arith
