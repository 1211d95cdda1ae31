// summarize.mjs RESULTS-DIR [REQUIREMENTS.yaml]
//
// Reads the checks.json files the conformance suite wrote under RESULTS-DIR
// (its -o directory: one server-<scenario>-<time>/checks.json per scenario)
// and prints one line per scenario with its counts by status, then the
// totals. With a requirement set (the suite's requirements/<rev>.yaml), only
// the scenarios its `server:` list names are scored; the others are shown
// as "not scored", as the suite itself does.
//
// Exit status: 1 if a scored scenario has a FAILURE check, or if no
// scenario ran at all, or if a scenario the requirement set scores did not
// run; else 0. Run by scripts/conformance.sh with the pinned Node.
import { readFileSync, readdirSync, existsSync } from "node:fs";
import { join } from "node:path";

const [dir, reqFile] = process.argv.slice(2);
if (!dir) {
  console.error("usage: summarize.mjs RESULTS-DIR [REQUIREMENTS.yaml]");
  process.exit(2);
}

// scoredServerScenarios reads the `server:` list of a requirement set: the
// file is a frozen, flat YAML list, so a line scan is enough.
function scoredServerScenarios(file) {
  const names = [];
  let inServer = false;
  for (const line of readFileSync(file, "utf8").split("\n")) {
    if (/^\S/.test(line)) inServer = line.startsWith("server:");
    const m = inServer && line.match(/^\s+-\s+([A-Za-z0-9._/-]+)\s*$/);
    if (m) names.push(m[1]);
  }
  return names;
}

const results = new Map(); // scenario → checks
for (const entry of readdirSync(dir, { withFileTypes: true })) {
  const m = entry.isDirectory() && entry.name.match(/^server-(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$/);
  const file = m && join(dir, entry.name, "checks.json");
  if (file && existsSync(file)) results.set(m[1], JSON.parse(readFileSync(file, "utf8")));
}
const scored = reqFile ? new Set(scoredServerScenarios(reqFile)) : null;

const statuses = ["SUCCESS", "FAILURE", "WARNING", "SKIPPED", "INFO"];
const total = { scored: 0, scoredOK: 0, unscored: 0, unscoredOK: 0 };
const checks = Object.fromEntries(statuses.map((s) => [s, 0]));
const failures = [];
for (const [scenario, list] of results) {
  const n = Object.fromEntries(statuses.map((s) => [s, 0]));
  for (const c of list) n[c.status] = (n[c.status] ?? 0) + 1;
  const isScored = !scored || scored.has(scenario);
  const ok = n.FAILURE === 0;
  if (isScored) {
    total.scored++;
    if (ok) total.scoredOK++;
    for (const s of statuses) checks[s] += n[s];
    for (const c of list.filter((c) => c.status === "FAILURE"))
      failures.push(`${scenario}: ${c.id}: ${c.errorMessage ?? c.description}`);
  } else {
    total.unscored++;
    if (ok) total.unscoredOK++;
  }
  const extra = statuses.slice(2).filter((s) => n[s] > 0).map((s) => `${n[s]} ${s.toLowerCase()}`);
  console.log(
    `  ${ok ? "✓" : "✗"} ${scenario}: ${n.SUCCESS} passed, ${n.FAILURE} failed` +
      (extra.length ? `, ${extra.join(", ")}` : "") +
      (isScored ? "" : " (not scored)"),
  );
}
const missing = scored ? [...scored].filter((s) => !results.has(s)) : [];
for (const s of missing) console.log(`  ✗ ${s}: did not run`);

console.log(
  `scenarios: ${total.scoredOK}/${total.scored + missing.length} passed` +
    (scored ? ` (scored); not scored: ${total.unscoredOK}/${total.unscored} passed` : "") +
    `; checks: ${checks.SUCCESS} passed, ${checks.FAILURE} failed, ${checks.WARNING} warnings, ${checks.SKIPPED} skipped`,
);
for (const f of failures) console.log(`  FAILED ${f}`);
process.exit(results.size === 0 || missing.length > 0 || failures.length > 0 ? 1 : 0);
