// Code-corpus families over lists of numbers (and pairs of lists). Each family fills the
// placeholders its templates name and draws from c.rng in a fixed order: the order is part of
// the corpus's definition (see corpus_code_detail.h).
#include <cstdint>
#include <string>

#include "trainer/corpus_code_detail.h"

namespace updraft::corpus::detail::code {

void extreme(Ctx& c) {
  const bool mx = c.rng.chance(1, 2);
  c.v.set("gt", mx ? ">" : "<");
  c.v.set("ext", mx ? "largest" : "smallest");
  if (mx)
    c.name({"max_of", "largest", "find_max", "biggest", "max_value", "greatest", "maximum"});
  else
    c.name({"min_of", "smallest", "find_min", "least", "min_value", "lowest", "minimum"});
  c.sig("{L}", "returns the {ext} element of {L}",
        "{best} = {L}[0]\nfor {x} in {L}:\n    if {x} {gt} {best}:\n        {best} = {x}\nreturn {best}\n");
}

void sum_list(Ctx& c) {
  c.name({"sum_of", "list_sum", "add_all", "total_of", "sum_all", "add_up", "summed"});
  c.sig("{L}", "returns the sum of the numbers in {L}", "{acc} = 0\nfor {x} in {L}:\n    {acc} += {x}\nreturn {acc}\n");
}

void product_list(Ctx& c) {
  c.name({"product_of", "list_product", "multiply_all", "prod_all", "times_all", "multiply_list"});
  c.sig("{L}", "returns the product of the numbers in {L}",
        "{prod} = 1\nfor {x} in {L}:\n    {prod} *= {x}\nreturn {prod}\n");
}

void count_cmp(Ctx& c) {
  c.cmp();
  c.constant("K", 0, 20);
  c.name({"count_{tag}", "num_{tag}", "how_many_{tag}"});
  c.sig("{L}", "returns how many elements of {L} are {opw} {K}",
        "{cnt} = 0\nfor {x} in {L}:\n    if {x} {op} {K}:\n        {cnt} += 1\nreturn {cnt}\n");
}

void filter_cmp(Ctx& c) {
  c.cmp();
  c.constant("K", 0, 20);
  c.name({"keep_{tag}", "filter_{tag}", "only_{tag}"});
  c.sig("{L}", "returns a list of the elements of {L} that are {opw} {K}",
        "{out} = []\nfor {x} in {L}:\n    if {x} {op} {K}:\n        {out}.append({x})\nreturn {out}\n");
}

void any_cmp(Ctx& c) {
  c.cmp();
  c.constant("K", 0, 20);
  c.name({"any_{tag}", "has_one_{tag}", "some_{tag}"});
  c.sig("{L}", "returns True if some element of {L} is {opw} {K}, otherwise False",
        "for {x} in {L}:\n    if {x} {op} {K}:\n        return True\nreturn False\n");
}

void all_cmp(Ctx& c) {
  c.cmp();
  c.constant("K", 0, 20);
  c.name({"all_{tag}", "every_{tag}", "each_{tag}"});
  c.sig("{L}", "returns True if every element of {L} is {opw} {K}, otherwise False",
        "for {x} in {L}:\n    if {x} {neg} {K}:\n        return False\nreturn True\n");
}

void map_arith(Ctx& c) {
  const uint32_t form = c.rng.below(3);
  c.constant("K", 2, 12);
  static constexpr const char* kOps[] = {"+", "-", "*"};
  static constexpr const char* kDescs[] = {"{K} added to each element of {L}",
                                           "{K} subtracted from each element of {L}",
                                           "each element of {L} multiplied by {K}"};
  c.v.set("mop", kOps[form]);
  c.v.set("what", c.v.fill(kDescs[form]));
  if (form == 0)
    c.name({"add_to_each", "shift_up", "plus_each"});
  else if (form == 1)
    c.name({"subtract_from_each", "shift_down", "minus_each"});
  else
    c.name({"scale", "multiply_each", "times_each"});
  c.sig("{L}", "returns a new list with {what}",
        "{out} = []\nfor {x} in {L}:\n    {out}.append({x} {mop} {K})\nreturn {out}\n");
}

namespace {

void parity_setup(Ctx& c) {
  const bool even = c.rng.chance(1, 2);
  c.v.set("par", even ? "even" : "odd");
  c.v.set("pars", even ? "evens" : "odds");
  c.v.set("pop", even ? "==" : "!=");
}

}  // namespace

void count_parity(Ctx& c) {
  parity_setup(c);
  c.name({"count_{pars}", "num_{pars}", "how_many_{pars}"});
  c.sig("{L}", "returns how many elements of {L} are {par}",
        "{cnt} = 0\nfor {x} in {L}:\n    if {x} % 2 {pop} 0:\n        {cnt} += 1\nreturn {cnt}\n");
}

void filter_parity(Ctx& c) {
  parity_setup(c);
  c.name({"{pars}", "keep_{pars}", "only_{pars}"});
  c.sig("{L}", "returns a list of the {par} elements of {L}",
        "{out} = []\nfor {x} in {L}:\n    if {x} % 2 {pop} 0:\n        {out}.append({x})\nreturn {out}\n");
}

void sum_parity(Ctx& c) {
  parity_setup(c);
  c.name({"sum_{pars}", "total_{pars}", "add_{pars}"});
  c.sig("{L}", "returns the sum of the {par} elements of {L}",
        "{acc} = 0\nfor {x} in {L}:\n    if {x} % 2 {pop} 0:\n        {acc} += {x}\nreturn {acc}\n");
}

void mean(Ctx& c) {
  c.name({"mean", "average", "avg", "mean_of", "average_of", "list_mean"});
  c.sig("{L}", "returns the average of the numbers in {L}",
        "{acc} = 0\nfor {x} in {L}:\n    {acc} += {x}\nreturn {acc} / len({L})\n");
}

void contains(Ctx& c) {
  c.name({"contains", "has_value", "includes", "is_member", "occurs_in", "appears", "find_value"});
  c.sig("{L}, {t}", "returns True if {t} occurs in {L}, otherwise False",
        "for {x} in {L}:\n    if {x} == {t}:\n        return True\nreturn False\n");
}

void index_of(Ctx& c) {
  c.name({"index_of", "find_index", "position_of", "locate", "where_is", "first_index", "search"});
  c.sig("{L}, {t}", "returns the index of the first occurrence of {t} in {L}, or -1 if there is none",
        "for {i} in range(len({L})):\n    if {L}[{i}] == {t}:\n        return {i}\nreturn -1\n");
}

void reverse_list(Ctx& c) {
  c.name({"reverse_list", "reversed_copy", "backwards", "flip_list", "reverse_items", "mirror"});
  c.sig("{L}", "returns a new list with the elements of {L} in reverse order",
        "{out} = []\nfor {i} in range(len({L}) - 1, -1, -1):\n    {out}.append({L}[{i}])\nreturn {out}\n");
}

void map_power(Ctx& c) {
  const bool sq = c.rng.chance(1, 2);
  c.v.set("pw", sq ? "{x} * {x}" : "{x} * {x} * {x}");
  c.v.set("pw", c.v.fill(c.v.get("pw")));
  c.v.set("what", sq ? "squares" : "cubes");
  if (sq)
    c.name({"squares", "square_all", "squared", "square_each", "list_squares"});
  else
    c.name({"cubes", "cube_all", "cubed", "cube_each", "list_cubes"});
  c.sig("{L}", "returns a list of the {what} of the elements of {L}",
        "{out} = []\nfor {x} in {L}:\n    {out}.append({pw})\nreturn {out}\n");
}

void count_multiples(Ctx& c) {
  c.constant("K", 2, 9);
  c.name({"count_multiples", "multiples_count", "num_divisible", "count_divisible", "divisible_count"});
  c.sig("{L}", "returns how many elements of {L} are divisible by {K}",
        "{cnt} = 0\nfor {x} in {L}:\n    if {x} % {K} == 0:\n        {cnt} += 1\nreturn {cnt}\n");
}

void end_element(Ctx& c) {
  const bool last = c.rng.chance(1, 2);
  c.v.set("pos", last ? "last" : "first");
  c.v.set("at", last ? "-1" : "0");
  if (last)
    c.name({"last", "last_item", "final_element", "tail_value", "get_last"});
  else
    c.name({"first", "first_item", "head", "front", "get_first"});
  c.sig("{L}", "returns the {pos} element of {L}", "return {L}[{at}]\n");
}

void running_sum(Ctx& c) {
  c.name({"running_sum", "prefix_sums", "cumulative", "running_totals", "cumsum", "partial_sums"});
  c.sig("{L}", "returns the list of running totals of {L}",
        "{out} = []\n{acc} = 0\nfor {x} in {L}:\n    {acc} += {x}\n    {out}.append({acc})\nreturn {out}\n");
}

void dedupe(Ctx& c) {
  c.name({"unique", "dedupe", "distinct", "remove_duplicates", "uniq", "no_repeats"});
  c.sig("{L}", "returns the elements of {L} without repeats, in order of first occurrence",
        "{out} = []\nfor {x} in {L}:\n    if {x} not in {out}:\n        {out}.append({x})\nreturn {out}\n");
}

void differences(Ctx& c) {
  c.name({"differences", "deltas", "steps_between", "gaps", "consecutive_diffs", "diffs"});
  c.sig("{L}", "returns the differences between consecutive elements of {L}",
        "{out} = []\nfor {i} in range(1, len({L})):\n    {out}.append({L}[{i}] - {L}[{i} - 1])\nreturn {out}\n");
}

namespace {

void pair_setup(Ctx& c) {
  const auto& p = c.rng.pick(kListPairs);
  c.v.set("L1", p[0]);
  c.v.set("L2", p[1]);
}

}  // namespace

void dot(Ctx& c) {
  pair_setup(c);
  c.name({"dot", "dot_product", "inner", "inner_product", "dot_of", "scalar_product"});
  c.sig("{L1}, {L2}", "returns the dot product of the equally long lists {L1} and {L2}",
        "{acc} = 0\nfor {i} in range(len({L1})):\n    {acc} += {L1}[{i}] * {L2}[{i}]\nreturn {acc}\n");
}

void combine_lists(Ctx& c) {
  pair_setup(c);
  const uint32_t form = c.rng.below(3);
  static constexpr const char* kOps[] = {"+", "-", "*"};
  static constexpr const char* kWhat[] = {"sums", "differences", "products"};
  c.v.set("mop", kOps[form]);
  c.v.set("what", kWhat[form]);
  if (form == 0)
    c.name({"add_lists", "pairwise_sum", "elementwise_add", "sum_lists", "zip_add"});
  else if (form == 1)
    c.name({"subtract_lists", "pairwise_diff", "elementwise_sub", "diff_lists", "zip_sub"});
  else
    c.name({"multiply_lists", "pairwise_product", "elementwise_mul", "product_lists", "zip_mul"});
  c.sig("{L1}, {L2}", "returns the element-wise {what} of the equally long lists {L1} and {L2}",
        "{out} = []\nfor {i} in range(len({L1})):\n    {out}.append({L1}[{i}] {mop} {L2}[{i}])\nreturn {out}\n");
}

void arg_extreme(Ctx& c) {
  const bool mx = c.rng.chance(1, 2);
  c.v.set("gt", mx ? ">" : "<");
  c.v.set("ext", mx ? "largest" : "smallest");
  if (mx)
    c.name({"argmax", "index_of_max", "max_index", "where_max", "pos_of_max"});
  else
    c.name({"argmin", "index_of_min", "min_index", "where_min", "pos_of_min"});
  c.sig("{L}", "returns the index of the first {ext} element of {L}",
        "{best} = 0\nfor {i} in range(1, len({L})):\n    if {L}[{i}] {gt} {L}[{best}]:\n        {best} = {i}\nreturn "
        "{best}\n");
}

void is_sorted(Ctx& c) {
  const bool up = c.rng.chance(1, 2);
  c.v.set("bad", up ? "<" : ">");
  c.v.set("order", up ? "ascending" : "descending");
  if (up)
    c.name({"is_sorted", "is_ascending", "in_order", "sorted_up", "is_increasing", "check_sorted"});
  else
    c.name({"is_descending", "sorted_down", "is_decreasing", "in_reverse_order", "check_descending"});
  c.sig("{L}", "returns True if {L} is in {order} order, otherwise False",
        "for {i} in range(1, len({L})):\n    if {L}[{i}] {bad} {L}[{i} - 1]:\n        return False\nreturn True\n");
}

void count_between(Ctx& c) {
  const int lo = c.rng.range(0, 10);
  c.v.set("LO", std::to_string(lo));
  c.v.set("HI", std::to_string(lo + c.rng.range(1, 20)));
  c.name({"count_between", "count_in_range", "num_between", "between_count", "in_range_count"});
  c.sig("{L}", "returns how many elements of {L} lie between {LO} and {HI} inclusive",
        "{cnt} = 0\nfor {x} in {L}:\n    if {LO} <= {x} <= {HI}:\n        {cnt} += 1\nreturn {cnt}\n");
}

void spread(Ctx& c) {
  c.name({"spread", "value_range", "max_minus_min", "range_of", "span", "amplitude"});
  c.sig("{L}", "returns the largest element of {L} minus the smallest", "return max({L}) - min({L})\n");
}

}  // namespace updraft::corpus::detail::code
