#include "rollout/serve/dashboard.h"

namespace updraft {

const char* dashboard_html() {
  return R"HTML(<!doctype html>
<html><head><meta charset="utf-8"><title>updraft: drift dashboard</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em} .muted{color:#777;font-size:.9em}
svg{background:#fafafa;border:1px solid #ddd;margin:.5em 0}
table{border-collapse:collapse;font-size:.9em} td,th{border:1px solid #ddd;padding:.2em .6em;text-align:right}
</style></head><body>
<h1>updraft &mdash; drift dashboard <span id="model" class="muted"></span></h1>
<div id="status" class="muted">loading&hellip;</div>
<h2>&tau; per window of serving steps</h2><svg id="tau" width="900" height="260"></svg>
<h2>generated tokens/s per window of serving steps</h2><svg id="tps" width="900" height="200"></svg>
<div class="muted">dashed red: policy update; dashed blue: drafter swap; colour: drafter version</div>
<h2>by version</h2><table id="table"></table>
<script>
"use strict";
const key = new URLSearchParams(location.hash.slice(1)).get("key");
const colours = ["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#e377c2","#17becf"];
const NS = "http://www.w3.org/2000/svg";
function el(name, attrs, parent) {
  const e = document.createElementNS(NS, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  parent.appendChild(e);
  return e;
}
function plot(svg, pts, field, markers) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const W = +svg.getAttribute("width"), H = +svg.getAttribute("height"), L = 50, B = 25, T = 10, R = 10;
  const ok = pts.filter(p => p[field] !== null && p[field] !== undefined);
  if (!ok.length) { el("text", {x: L, y: H / 2}, svg).textContent = "no data yet"; return; }
  const t0 = pts[0].t, t1 = Math.max(pts[pts.length - 1].t, t0 + 1e-9);
  let lo = Math.min(...ok.map(p => p[field])), hi = Math.max(...ok.map(p => p[field]));
  if (field === "tau") lo = Math.min(lo, 1);
  if (hi - lo < 1e-9) hi = lo + 1;
  const x = t => L + (W - L - R) * (t - t0) / (t1 - t0), y = v => H - B - (H - B - T) * (v - lo) / (hi - lo);
  for (let i = 0; i <= 4; i++) {
    const v = lo + (hi - lo) * i / 4;
    el("line", {x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#eee"}, svg);
    el("text", {x: 4, y: y(v) + 4, "font-size": 11}, svg).textContent = v.toFixed(2);
  }
  el("text", {x: W - R - 120, y: H - 6, "font-size": 11}, svg).textContent = "seconds since start";
  for (const m of markers)
    el("line", {x1: x(m.t), x2: x(m.t), y1: T, y2: H - B, stroke: m.colour, "stroke-dasharray": "4 3"}, svg);
  const byDrafter = {};
  for (const p of ok) (byDrafter[p.drafter_version] = byDrafter[p.drafter_version] || []).push(p);
  for (const d in byDrafter) {
    const c = colours[d % colours.length], ps = byDrafter[d];
    el("polyline", {points: ps.map(p => x(p.t) + "," + y(p[field])).join(" "), fill: "none", stroke: c,
                    "stroke-opacity": .5}, svg);
    for (const p of ps) el("circle", {cx: x(p.t), cy: y(p[field]), r: 2.5, fill: c}, svg);
  }
}
function render(data) {
  const pts = data.windows;
  document.getElementById("model").textContent = data.model;
  const markers = [];
  for (let i = 1; i < pts.length; i++) {
    if (pts[i].policy_version !== pts[i - 1].policy_version || pts[i].policy_swapped)
      markers.push({t: pts[i].t, colour: "#d62728"});
    if (pts[i].drafter_version !== pts[i - 1].drafter_version || pts[i].drafter_swapped)
      markers.push({t: pts[i].t, colour: "#1f77b4"});
  }
  plot(document.getElementById("tau"), pts, "tau", markers);
  plot(document.getElementById("tps"), pts, "tokens_per_second", markers);
  const groups = {};
  for (const p of pts) {
    const k = p.policy_version + "/" + p.drafter_version;
    const g = groups[k] = groups[k] || {policy: p.policy_version, drafter: p.drafter_version, windows: 0, rounds: 0,
                                        accepted: 0, tokens: 0, seconds: 0, all_rounds: 0, by: [0, 0, 0]};
    g.windows++; g.tokens += p.tokens; g.seconds += p.seconds; g.all_rounds += p.rounds;
    ["eagle", "group", "history"].forEach((s, i) => { g.by[i] += p["accepted_" + s] || 0; });
    if (p.tau !== null) { g.rounds += p.rounds; g.accepted += (p.tau - 1) * p.rounds; }
  }
  let html = "<tr><th>policy</th><th>drafter</th><th>windows</th><th>&tau;</th><th>tokens/s</th>" +
             "<th>accepted per round: drafter | group | history</th></tr>";
  for (const k in groups) {
    const g = groups[k];
    html += "<tr><td>v" + g.policy + "</td><td>v" + g.drafter + "</td><td>" + g.windows + "</td><td>" +
            (g.rounds ? (1 + g.accepted / g.rounds).toFixed(2) : "&ndash;") + "</td><td>" +
            (g.seconds ? (g.tokens / g.seconds).toFixed(1) : "&ndash;") + "</td><td>" +
            (g.all_rounds ? g.by.map(v => (v / g.all_rounds).toFixed(2)).join(" | ") : "&ndash;") + "</td></tr>";
  }
  document.getElementById("table").innerHTML = html;
  const last = pts[pts.length - 1];
  document.getElementById("status").textContent = pts.length ?
    pts.length + " windows; serving policy v" + last.policy_version + ", drafter v" + last.drafter_version +
    "; updated " + new Date().toLocaleTimeString() : "no serving step yet";
}
async function tick() {
  try {
    const r = await fetch("/dashboard/data", {headers: key ? {Authorization: "Bearer " + key} : {}});
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
  } catch (e) {
    document.getElementById("status").textContent = "cannot load /dashboard/data: " + e.message;
  }
}
tick();
setInterval(tick, 2000);
</script></body></html>
)HTML";
}

}  // namespace updraft
