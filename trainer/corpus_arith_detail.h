// Internal to the arith corpus's .cc files (corpus_arith*.cc); not part of the public API (see
// corpus.h) nor of corpus_detail.h's. It declares what they share: the name and thing tables, the
// worked solution Work, the cast of a story, the sentence helpers, and the template families that
// corpus_arith.cc registers.
//
// Contract of a family (void f(Rng& rng, Sample& s, Work& w)): it sets s.prompt to the question
// (make_arith adds "Question: " and "\nAnswer:") and records one to three steps in w, each of
// whose operands is a number written in the question or an earlier result; make_arith sets the
// other fields. Its draws from rng, their number and order, are part of the corpus's definition:
// changing them changes every later sample's text.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/core/error.h"
#include "trainer/corpus_detail.h"

namespace updraft::corpus::detail::arith {

struct Person {
  const char* name;
  bool she;
};
inline constexpr Person kPeople[] = {
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
inline constexpr Thing kThings[] = {
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

std::string num(int v);                  // decimal
std::string years(int v);                // "1 year", "2 years"
const char* article(const char* noun);   // "a " or "an "
std::string capitalised(std::string s);  // first letter upper-cased

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

Cast pick_cast(Rng& rng);

// A sentence after the first: optionally led by a connector, capitalised either way.
std::string later(Rng& rng, const std::string& body);

// One change to the person's count v; appends the sentence and the step, returns the new count.
// `allow_times` permits one multiplication; `last_minus` reports whether it took some away.
int change(Rng& rng, const Cast& c, const Thing& t, int v, bool& allow_times, bool& last_minus, Work& w,
           std::string& q);

// The closing question of a story about the person's count of t.
std::string have_question(Rng& rng, const Cast& c, const Thing& t, bool last_minus);

// A person's things and money (corpus_arith_stories.cc).
void story(Rng& rng, Sample& s, Work& w);
void boxes(Rng& rng, Sample& s, Work& w);
void shop(Rng& rng, Sample& s, Work& w);
void savings(Rng& rng, Sample& s, Work& w);
void compare(Rng& rng, Sample& s, Work& w);

// Work over time, vehicles, rows, gauges and ages (corpus_arith_scenes.cc).
void rate(Rng& rng, Sample& s, Work& w);
void vehicle(Rng& rng, Sample& s, Work& w);
void rows(Rng& rng, Sample& s, Work& w);
void level(Rng& rng, Sample& s, Work& w);
void ages(Rng& rng, Sample& s, Work& w);

}  // namespace updraft::corpus::detail::arith
