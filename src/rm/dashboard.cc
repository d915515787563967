#include "rm/dashboard.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace switchyard::rm {
namespace {

std::string Json(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

// Every value reaches the page through textContent, never as markup: host names and
// session owners come from the network.
constexpr char kPage[] = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Switchyard</title>
<style>
  body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
  h1 { font-size: 1.3em; margin: 0 0 .2em; }
  h2 { font-size: 1.05em; margin: 1.4em 0 .4em; }
  table { border-collapse: collapse; }
  th, td { padding: .25em .8em; border-bottom: 1px solid #ddd; text-align: left; }
  th { background: #f4f4f4; }
  tr[data-health="down"] td { background: #fde2e2; }
  .muted { color: #777; }
  #error { color: #b00; }
</style>
</head>
<body>
<h1>Switchyard</h1>
<p><span id="summary">loading&hellip;</span> <span id="updated" class="muted"></span>
   <span id="error"></span></p>
<h2>Hosts</h2>
<table id="hosts"><thead><tr><th>slice</th><th>host</th><th>address</th><th>health</th>
  <th>devices</th><th>held by</th><th>buffers</th><th>buffer MiB</th><th>executables</th>
  <th>executions</th><th>device s</th><th>busy s by device</th></tr></thead><tbody></tbody>
</table>
<h2>Processes</h2>
<table id="processes"><thead><tr><th>process</th><th>address</th><th>pid</th><th>RSS MiB</th>
  <th>staged MiB</th><th>sessions</th><th>reported</th></tr></thead><tbody></tbody></table>
<h2>Device time by tenant</h2>
<table id="tenants"><thead><tr><th>tenant</th><th>device s</th><th>part</th></tr></thead>
  <tbody></tbody></table>
<h2>Recent programs</h2>
<table id="recent"><thead><tr><th>finished</th><th>host</th><th>program</th><th>tenant</th>
  <th>device ms</th></tr></thead><tbody></tbody></table>
<h2>Leases</h2>
<table id="leases"><thead><tr><th>lease</th><th>state</th><th>tenant</th><th>asked</th>
  <th>slices</th><th>age</th><th>owner</th></tr></thead><tbody></tbody></table>
<p id="no-leases" class="muted"></p>
<script>
"use strict";
function row(cells, attributes) {
  const tr = document.createElement("tr");
  for (const [k, v] of Object.entries(attributes || {})) tr.setAttribute(k, v);
  for (const cell of cells) {
    const td = document.createElement("td");
    td.textContent = cell === undefined || cell === null ? "" : String(cell);
    tr.appendChild(td);
  }
  return tr;
}
function fill(id, rows) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren(...rows);
}
function shapes(lease) {
  return (lease.slices || []).map(s => (s.kind || "any") + ":" + s.devices).join(",");
}
function render(status) {
  const fleet = status.fleet, leases = status.leases, stats = status.stats;
  const holder = {};
  for (const lease of leases.held || []) {
    for (const s of lease.slice_indices || []) holder[s] = lease.tenant + " #" + lease.lease_id;
  }
  let hosts = 0, healthy = 0, devices = 0;
  const rows = [], tenants = new Map();
  const sum = m => Object.values(m || {}).reduce((a, b) => a + b, 0);
  for (const slice of fleet.slices || []) {
    for (const host of slice.hosts || []) {
      hosts++; if (host.healthy) healthy++;
      devices += (host.devices || []).length;
      const s = stats[host.address];
      const health = host.healthy ? "healthy"
          : (host.rejoining ? "rejoining" : "DOWN " + Math.floor(host.last_heartbeat_age_ms / 1000) + "s");
      rows.push(row([slice.slice_index, host.host_index, host.address, health,
                     (host.devices || []).map(d => d.global_id).join(","),
                     holder[slice.slice_index] || "",
                     s ? s.buffers : "", s ? (s.buffer_bytes / 1048576).toFixed(1) : "",
                     s ? s.executables : "", s ? s.executions : "",
                     s ? sum(s.device_seconds).toFixed(1) : "",
                     s ? Object.entries(s.device_busy_seconds || {}).map(
                             ([d, v]) => d + ": " + v.toFixed(1)).join(", ") : ""],
                    {"data-host": slice.slice_index + "/" + host.host_index,
                     "data-health": host.healthy ? "healthy" : "down"}));
    }
  }
  fill("hosts", rows);
  const mib = bytes => (Number(bytes || 0) / 1048576).toFixed(1);
  const processes = Number(fleet.rm_pid || 0) ? [row(["resource manager", "", fleet.rm_pid,
      mib(fleet.rm_resident_bytes), "", "", "now"])] : [];
  for (const p of fleet.proxies || []) {
    processes.push(row(["proxy", p.address, p.pid, mib(p.resident_bytes), mib(p.host_buffer_bytes),
                        p.sessions, Math.floor(Number(p.last_report_age_ms) / 1000) + "s ago"]));
  }
  fill("processes", processes);
  for (const s of Object.values(stats)) {
    for (const [t, v] of Object.entries(s.device_seconds || {})) tenants.set(t, (tenants.get(t) || 0) + v);
  }
  const total = [...tenants.values()].reduce((a, b) => a + b, 0);
  const recent = [];
  for (const [address, s] of Object.entries(stats)) {
    for (const r of s.recent_launches || []) recent.push([address, r]);
  }
  recent.sort((a, b) => Number(b[1].finished_unix_ms) - Number(a[1].finished_unix_ms));
  fill("recent", recent.slice(0, 20).map(([address, r]) => row([
      new Date(Number(r.finished_unix_ms)).toLocaleTimeString(), address, r.program,
      r.tenant || "", ((r.device_seconds || 0) * 1e3).toFixed(2)])));
  fill("tenants", [...tenants.entries()].sort((a, b) => b[1] - a[1]).map(
      ([t, v]) => row([t || "(sessions without a tenant)", v.toFixed(1),
                       total > 0 ? (100 * v / total).toFixed(1) + "%" : ""])));
  const held = leases.held || [], queued = leases.queued || [];
  document.getElementById("summary").textContent =
      (fleet.slices || []).length + " slices, " + hosts + " hosts (" + healthy + " healthy), " +
      devices + " devices; " + held.length + " leases held, " + queued.length + " queued";
  fill("leases", held.map(l => row([l.lease_id, "held", l.tenant, shapes(l),
                                    (l.slice_indices || []).join(","),
                                    Math.floor(l.age_ms / 1000) + "s", l.owner]))
      .concat(queued.map((l, i) => row([l.lease_id, "queued #" + (i + 1), l.tenant, shapes(l), "",
                                        Math.floor(l.age_ms / 1000) + "s", l.owner]))));
  document.getElementById("no-leases").textContent =
      held.length + queued.length ? "" : "No sessions lease slices (proxies without --virtual_slices see the whole fleet).";
}
async function refresh() {
  try {
    const response = await fetch("/api/status", {cache: "no-store"});
    if (!response.ok) throw new Error("HTTP " + response.status);
    render(await response.json());
    document.getElementById("error").textContent = "";
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    document.getElementById("error").textContent = "resource manager unreachable: " + e.message;
  }
}
refresh();
setInterval(refresh, 1000);
</script>
</body>
</html>
)html";

}  // namespace

const std::string& DashboardHtml() {
  static const std::string* page = new std::string(kPage);
  return *page;
}

std::string StatusJson(const Fleet& fleet, const LeaseTable& leases,
                       const std::map<std::string, WorkerStats>& stats) {
  std::string json =
      absl::StrCat("{\"fleet\":", Json(fleet), ",\"leases\":", Json(leases), ",\"stats\":{");
  bool first = true;
  for (const auto& [address, worker] : stats) {
    google::protobuf::Value key;  // a JSON string, escaped
    key.set_string_value(address);
    absl::StrAppend(&json, first ? "" : ",", Json(key), ":", Json(worker));
    first = false;
  }
  absl::StrAppend(&json, "}}");
  return json;
}

}  // namespace switchyard::rm
