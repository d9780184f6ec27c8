// Chat templates: a Jinja2 subset that renders the chat templates Hugging Face tokenizers ship
// ("chat_template" in tokenizer_config.json) byte for byte as transformers' apply_chat_template
// does. tests/rollout/chat_template_test.cc checks it against PyPI jinja2
// (tests/fixtures/chat_templates, made by tools/make_chat_template_fixtures.py).
//
// Environment, as transformers builds it: jinja2's ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks on, no autoescape, one trailing newline of the source dropped,
// "\r\n" and "\r" read as "\n", loop controls on, and transformers' own tojson:
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False), so no HTML
// escaping and keys in order (positional arguments in that order: tojson(2) is ensure_ascii=2;
// write tojson(indent=2)). render()'s variables come from an nlohmann::json, whose objects keep
// their keys sorted; dict literals keep source order. Names follow jinja2's static scoping: a set
// inside a for body (or for else, set block, generation block) stays there (use namespace()),
// and a name that a scope assigns before anything reads it is undefined in that scope until then.
//
// Supported:
//  * {{ expr }}, {# comments #}, whitespace control {%- -%} {{- -}} {#- -#} and the + forms.
//  * {% if %} {% elif %} {% else %} {% endif %}; {% for x in xs [if cond] %} ... [{% else %}]
//    {% endfor %}, with {% for k, v in d.items() %} unpacking, {% break %}, {% continue %}, and
//    loop.index, index0, revindex, revindex0, first, last, length, previtem, nextitem, depth,
//    cycle(...); {% set x = e %}, {% set ns.attr = e %}, {% set x %}...{% endset %};
//    {% generation %}...{% endgeneration %} (transformers' assistant-mask marker: its body).
//  * Literals ('s', "s" with Python escapes, 1, 1.5, 1e3, true/True, false/False, none/None,
//    [..], {..}, (..) tuples), names, a.b, a['b'], a[0], a[-1], a[1:], a[::-1], + - * / // % **
//    ~, == != < > <= >= (chained), in, not in, and, or, not, a if c [else b], unary - +,
//    str % value (printf-style: s r d i f F e E g G x X o c, %%).
//  * Tests: defined undefined none boolean true false integer float number string mapping
//    iterable sequence odd even divisibleby eq equalto == ne != lt lessthan < le <= gt
//    greaterthan > ge >= in lower upper sameas.
//  * Filters: abs capitalize count default d first float format int items join last length list
//    lower map reject rejectattr replace reverse safe select selectattr string title tojson trim
//    upper. select, reject, selectattr, rejectattr, map and items give generators as in jinja2:
//    always true, no length or index until "| list".
//  * Methods: str strip lstrip rstrip startswith endswith split upper lower title capitalize
//    replace find count join; dict items keys values get; list/tuple count index; loop.cycle.
//  * Globals: raise_exception(msg), range(...), namespace(...), dict(...), strftime_now(fmt)
//    (local time, C strftime), and "is defined" is true for them (and for lipsum, cycler,
//    joiner, which are refused when called).
// Values follow Python: undefined names render "" and are false, attribute access on an
// undefined value is an error; none renders "None", booleans "True"/"False", floats, lists,
// tuples, dicts and dict views as Python's str()/repr(). Differences from jinja2: integers are
// 64-bit (overflow is an Error); a tuple inside a list or dict literal prints as a list;
// case mapping (upper, lower, title, capitalize) covers ASCII, Latin-1, Greek and Cyrillic;
// printing a generator (jinja2 prints its address), storing an undefined value or a generator
// in a list or dict literal, and string % with a tuple, list or mapping are Errors.
//
// Errors: everything else is refused by name: macro, call, filter blocks, include, import,
// from, extends, block, raw, with, autoescape, do, recursive loops, multiple-target set, *args,
// unknown tags, filters and tests (when the Template is built), unknown functions and methods,
// bad types (when rendering). All throw updraft::Error naming the template line
// ("chat template line 3: unknown filter 'foo'") after the source location the error macros put
// first; raise_exception(msg) throws exactly msg after that location.
//
// Thread safety: a Template is immutable after construction; render() is const and keeps its
// state on the stack, so any number of threads may render one Template at once.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace updraft::chat {

namespace detail {
struct Node;  // chat_template_internal.h
}  // namespace detail

class Template {
 public:
  // Parses `source`; Error naming the line and what is wrong.
  explicit Template(const std::string& source);
  // Renders with the given variables (a JSON object: messages, add_generation_prompt, bos_token,
  // eos_token, tools, ...; null for none). Error on bad types, undefined values used as objects,
  // raise_exception(msg) and the refusals above.
  std::string render(const nlohmann::json& vars) const;

 private:
  std::shared_ptr<const std::vector<detail::Node>> body_;
};

}  // namespace updraft::chat
