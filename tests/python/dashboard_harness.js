// Runs the dashboard page's script (argv[2]) against /dashboard/data JSON (argv[3]) with a
// minimal DOM, and prints what it rendered as JSON: the status line, the number of SVG elements
// drawn per chart, and the version table. Used by test_client.py when node is installed.
"use strict";
const fs = require("fs");
const data = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
function node(tag) {
  return {
    tag, attrs: {}, children: [], textContent: "", innerHTML: "",
    setAttribute(k, v) { this.attrs[k] = String(v); },
    getAttribute(k) { return this.attrs[k]; },
    appendChild(c) { this.children.push(c); },
    removeChild(c) { this.children.splice(this.children.indexOf(c), 1); },
    get firstChild() { return this.children[0]; },
  };
}
const els = {model: node("span"), status: node("div"), tau: node("svg"), tps: node("svg"), table: node("table")};
els.tau.attrs = {width: "900", height: "260"};
els.tps.attrs = {width: "900", height: "200"};
global.document = {getElementById: id => els[id], createElementNS: (ns, t) => node(t)};
global.location = {hash: ""};
global.fetch = async () => ({ok: true, json: async () => data});
global.setInterval = () => 0;
eval(fs.readFileSync(process.argv[2], "utf8"));
setTimeout(() => {
  const count = (svg, tag) => svg.children.filter(c => c.tag === tag).length;
  console.log(JSON.stringify({
    status: els.status.textContent,
    tau_points: count(els.tau, "circle"), tps_points: count(els.tps, "circle"),
    markers: els.tau.children.filter(c => c.tag === "line" && c.attrs["stroke-dasharray"]).length,
    table: els.table.innerHTML,
  }));
}, 50);
