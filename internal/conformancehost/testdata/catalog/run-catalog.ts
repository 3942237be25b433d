/**
 * Runs the conformance catalog: TS client × conformance-host (Go engine).
 * Usage: bun run-catalog.ts <hostUrl> [name-substring...]
 * Prints one line per scenario and a closing "N passed, N failed" line.
 */
import {
  CATALOG,
  formatReport,
  referenceCodecDriver,
  runCatalog,
  tsClientDriver,
} from '../src';
import { httpServerDriver } from './http-server-driver';

const [hostUrl, ...filters] = process.argv.slice(2);
if (hostUrl === undefined) {
  console.error('usage: bun run-catalog.ts <hostUrl> [name-substring...]');
  process.exit(2);
}
const scenarios =
  filters.length === 0
    ? CATALOG
    : CATALOG.filter((s) => filters.some((f) => s.name.includes(f)));
const report = await runCatalog(scenarios, {
  server: await httpServerDriver(hostUrl),
  client: tsClientDriver,
  codec: referenceCodecDriver,
});
console.log(formatReport(report));
process.exit(report.failed === 0 ? 0 : 1);
