// The arith domain: word problems from ten template families, each with a worked solution of
// one to three operations (+, -, *) on small non-negative integers. Every operand of a step is a
// number written in the question (or the factor of "doubles"/"triples") or an earlier result.
#include <string>

#include "kernels/core/error.h"
#include "trainer/corpus_detail.h"

namespace updraft::corpus::detail {
namespace {

struct Person {
  const char* name;
  bool she;
};
constexpr Person kPeople[] = {
    {"Mia", true},   {"Leo", false},   {"Ava", true},   {"Noah", false},  {"Emma", true},  {"Liam", false},
    {"Zoe", true},   {"Omar", false},  {"Lily", true},  {"Sam", false},   {"Nora", true},  {"Ben", false},
    {"Ruby", true},  {"Jack", false},  {"Ella", true},  {"Max", false},   {"Iris", true},  {"Hugo", false},
    {"Maya", true},  {"Theo", false},  {"Lena", true},  {"Finn", false},  {"Sara", true},  {"Eli", false},
    {"Nina", true},  {"Oscar", false}, {"Rosa", true},  {"Ivan", false},  {"Chloe", true}, {"Ravi", false},
    {"Amara", true}, {"Kenji", false}, {"Priya", true}, {"Diego", false}, {"Hana", true},  {"Tom", false},
    {"Grace", true}, {"Luca", false},  {"Aisha", true}, {"Felix", false},
};

struct Thing {
  const char* one;
  const char* many;
  const char* use;  // a verb that takes some away: "she eats 3"
};
constexpr Thing kThings[] = {
    {"apple", "apples", "eats"},         {"pear", "pears", "eats"},          {"cookie", "cookies", "eats"},
    {"muffin", "muffins", "eats"},       {"orange", "oranges", "eats"},      {"candy", "candies", "eats"},
    {"plum", "plums", "eats"},           {"cupcake", "cupcakes", "eats"},    {"sticker", "stickers", "uses"},
    {"stamp", "stamps", "uses"},         {"bead", "beads", "uses"},          {"ribbon", "ribbons", "uses"},
    {"pencil", "pencils", "breaks"},     {"crayon", "crayons", "breaks"},    {"marble", "marbles", "loses"},
    {"feather", "feathers", "loses"},    {"sock", "socks", "loses"},         {"card", "cards", "trades"},
    {"shell", "shells", "drops"},        {"coin", "coins", "spends"},        {"book", "books", "donates"},
    {"balloon", "balloons", "pops"},     {"egg", "eggs", "cracks"},          {"toy car", "toy cars", "gives away"},
    {"flower", "flowers", "gives away"}, {"notebook", "notebooks", "fills"}, {"kite", "kites", "loses"},
};

constexpr const char* kArithFamilies[] = {"story",   "boxes",   "shop", "rate",  "savings",
                                          "vehicle", "compare", "rows", "level", "ages"};
constexpr int kNumArithFamilies = static_cast<int>(sizeof(kArithFamilies) / sizeof(kArithFamilies[0]));

std::string num(int v) {
  return std::to_string(v);
}
std::string years(int v) {
  return num(v) + (v == 1 ? " year" : " years");
}
const char* article(const char* noun) {
  return noun[0] == 'a' || noun[0] == 'e' || noun[0] == 'i' || noun[0] == 'o' || noun[0] == 'u' ? "an " : "a ";
}

// The worked solution: " a op b = c." per step, then " The answer is c.\n".
class Work {
 public:
  int step(int a, char op, int b) {
    const int c = op == '+' ? a + b : op == '-' ? a - b : a * b;
    UPD_CHECK(c >= 0) << "negative intermediate " << a << op << b;
    text_ += " " + num(a) + " " + op + " " + num(b) + " = " + num(c) + ".";
    last_ = c;
    ++steps_;
    return c;
  }
  int steps() const { return steps_; }
  void finish(Sample& s) const {
    UPD_CHECK(steps_ >= 1 && steps_ <= 3) << steps_ << " steps";
    s.answer = num(last_);
    s.response = text_ + " The answer is " + s.answer + ".\n";
  }

 private:
  std::string text_;
  int last_ = 0, steps_ = 0;
};

// A person with pronouns, and the second person of the story (never the same name).
struct Cast {
  const Person* p;
  const Person* q;
  const char* subj() const { return p->she ? "she" : "he"; }
  const char* obj() const { return p->she ? "her" : "him"; }
  const char* poss() const { return p->she ? "her" : "his"; }
};

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
