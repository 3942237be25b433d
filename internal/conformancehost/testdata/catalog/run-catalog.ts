/**
 * Runs the conformance catalog: TS client × conformance-host (Go engine).
 * Usage: bun run-catalog.ts <hostUrl> [name-substring...]
 *
 * Each scenario runs under a timeout (CATALOG_TIMEOUT_S, default 60):
 * one that exceeds it is reported failed and the run goes on.
 * CATALOG_REPEAT=N runs the selected scenarios N times in a row and adds
 * one summary line per run and a closing "N runs" line.
 * Prints one line per scenario and a closing "N passed, N failed" line;
 * exits 1 when any run had a failure.
 */
import {
  CATALOG,
  type CatalogReport,
  formatReport,
  referenceCodecDriver,
  runScenario,
  type Scenario,
  type ScenarioResult,
  tsClientDriver,
} from '../src';
import { httpServerDriver } from './http-server-driver';

const [hostUrl, ...filters] = process.argv.slice(2);
if (hostUrl === undefined) {
  console.error('usage: bun run-catalog.ts <hostUrl> [name-substring...]');
  process.exit(2);
}
const timeoutMs = Number(process.env.CATALOG_TIMEOUT_S ?? '60') * 1000;
const repeat = Math.max(1, Number(process.env.CATALOG_REPEAT ?? '1'));
const scenarios =
  filters.length === 0
    ? CATALOG
    : CATALOG.filter((s) => filters.some((f) => s.name.includes(f)));
const pairing = {
  server: await httpServerDriver(hostUrl),
  client: tsClientDriver,
  codec: referenceCodecDriver,
};

/** runScenario, reported failed once it exceeds the timeout. */
async function timed(scenario: Scenario): Promise<ScenarioResult> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<ScenarioResult>((resolve) => {
    timer = setTimeout(
      () =>
        resolve({
          name: scenario.name,
          specRefs: scenario.specRefs,
          status: 'fail',
          error: `timed out after ${timeoutMs / 1000} s (the run goes on)`,
        }),
      timeoutMs,
    );
  });
  try {
    return await Promise.race([runScenario(scenario, pairing), timeout]);
  } catch (thrown) {
    return {
      name: scenario.name,
      specRefs: scenario.specRefs,
      status: 'fail',
      error: `runner: ${String(thrown)}`,
    };
  } finally {
    clearTimeout(timer);
  }
}

let dirtyRuns = 0;
for (let run = 1; run <= repeat; run++) {
  const results: ScenarioResult[] = [];
  for (const scenario of scenarios) results.push(await timed(scenario));
  const count = (...s: ScenarioResult['status'][]) =>
    results.filter((r) => s.includes(r.status)).length;
  const report: CatalogReport = {
    pairing: `${pairing.client.name} × ${pairing.server.name} (codec: ${pairing.codec.name})`,
    results,
    passed: count('pass', 'expected-fail'),
    failed: count('fail', 'unexpected-pass'),
    skipped: count('skipped'),
  };
  if (report.failed > 0) dirtyRuns++;
  if (repeat === 1) {
    console.log(formatReport(report));
  } else {
    const failures = results
      .filter((r) => r.status === 'fail' || r.status === 'unexpected-pass')
      .map((r) => `${r.name}: ${r.error ?? r.status}`);
    const line = `run ${run}/${repeat}: ${report.passed} passed, ${report.failed} failed, ${report.skipped} skipped`;
    console.log(line);
    for (const f of failures) console.log(`    ${f}`);
  }
}
if (repeat > 1) {
  console.log(
    `${repeat} runs of ${scenarios.length} scenarios: ${repeat - dirtyRuns} without a failure, ${dirtyRuns} with`,
  );
}
process.exit(dirtyRuns === 0 ? 0 : 1);
