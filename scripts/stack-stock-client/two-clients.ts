/**
 * Two stock Syncular web clients (the checkout's @syncular/client, wire
 * 2 at 0.15.48) against `make stack`: each syncs over HTTP through the
 * local API Gateway, connects its realtime socket through the stack's one
 * /realtime address with the client's own webSocketRealtimeConnector, and
 * must see the other's commit arrive. Copied next to the client's src/ by
 * scripts/stack-stock-client.sh.
 *
 *   bun two-clients.ts <baseURL> <realtimeURL> <token> <schema.json>
 */
import { readFileSync } from 'node:fs';
import {
  type ClientSchema,
  httpSegmentDownloader,
  httpSyncTransport,
  type RealtimeConnector,
  SyncClient,
  webSocketRealtimeConnector,
} from '../src/index';
import { BunClientDatabase } from '../src/bun-database';

const [base, realtimeUrl, token, schemaPath] = process.argv.slice(2);
if (!base || !realtimeUrl || !token || !schemaPath) {
  console.error('usage: bun two-clients.ts <baseURL> <realtimeURL> <token> <schema.json>');
  process.exit(2);
}
const schema = JSON.parse(readFileSync(schemaPath, 'utf8')) as ClientSchema;
const auth = { authorization: `Bearer ${token}` };
const run = crypto.randomUUID().slice(0, 8);
const project = `stock-${run}`;

interface Device {
  readonly name: string;
  readonly client: SyncClient;
  readonly counts: { http: number; deltas: number; rounds: number; wakes: number };
  readonly sync: () => void;
}

async function device(name: string): Promise<Device> {
  const counts = { http: 0, deltas: 0, rounds: 0, wakes: 0 };
  const clientId = `${name}-${run}`;
  const http = httpSyncTransport(`${base}/sync`, { headers: auth });
  const socket = webSocketRealtimeConnector(
    `${realtimeUrl}?clientId=${encodeURIComponent(clientId)}&token=${encodeURIComponent(token)}`,
  );
  // Count what crosses each channel, passing everything through.
  const realtime: RealtimeConnector = async (handlers) => {
    const conn = await socket({
      ...handlers,
      onBinary: (bytes) => {
        if (bytes[0] === 0x00) counts.deltas++;
        handlers.onBinary(bytes);
      },
      onText: (text) => {
        if (text.includes('"event":"sync"')) counts.wakes++;
        handlers.onText(text);
      },
    });
    return {
      ...conn,
      sendBytes: (bytes) => {
        if (bytes[0] === 0x01) counts.rounds++;
        conn.sendBytes(bytes);
      },
    };
  };
  // One sync loop at a time (the core refuses a second): a wake-up during
  // a sync runs one more when it ends.
  let client: SyncClient | undefined;
  let syncing = false;
  let again = false;
  const syncSoon = (): void => {
    if (syncing) {
      again = true;
      return;
    }
    syncing = true;
    void (async () => {
      try {
        do {
          again = false;
          await client?.syncUntilIdle();
        } while (again);
      } catch (err) {
        if (String(err).includes('already running')) {
          setTimeout(syncSoon, 10); // the app's own sync call is in flight
        } else {
          console.error(`${name}: sync:`, err);
        }
      } finally {
        syncing = false;
      }
    })();
  };
  client = new SyncClient({
    database: new BunClientDatabase(),
    schema,
    clientId,
    transport: async (bytes) => {
      counts.http++;
      return http(bytes);
    },
    segments: httpSegmentDownloader(`${base}/segments`, { headers: auth }),
    realtime,
    onSyncNeeded: syncSoon,
  });
  await client.start();
  client.subscribe({ id: 'tasks', table: 'tasks', scopes: { project_id: [project] } });
  await client.syncUntilIdle();
  await client.connectRealtime();
  return { name, client, counts, sync: syncSoon };
}

async function waitForRow(d: Device, id: string, timeoutMs = 15000): Promise<number> {
  const start = performance.now();
  while (performance.now() - start < timeoutMs) {
    if (d.client.query('SELECT id FROM tasks WHERE id = ?', [id]).length > 0) {
      return performance.now() - start;
    }
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  throw new Error(`${d.name}: row ${id} did not arrive within ${timeoutMs} ms`);
}

function task(id: string, by: string) {
  return {
    table: 'tasks',
    op: 'upsert' as const,
    values: { id, project_id: project, title: `from ${by}`, done: false, priority: null, notes: null, meta: null, updated_at: Date.now() },
  };
}

const a = await device('stock-a');
const b = await device('stock-b');
await new Promise((resolve) => setTimeout(resolve, 300)); // both hellos handled
let failed = false;
for (const [from, to, id] of [[a, b, `ta-${run}`], [b, a, `tb-${run}`], [a, b, `tc-${run}`]] as const) {
  const before = { ...to.counts };
  const t0 = performance.now();
  from.client.mutate([task(id, from.name)]);
  from.sync();
  while (from.client.pendingCommits().length > 0 && performance.now() - t0 < 15000) {
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  const pushed = performance.now() - t0;
  try {
    const ms = await waitForRow(to, id);
    console.log(
      `${from.name} → ${to.name}: ${id} pushed in ${pushed.toFixed(0)} ms, visible on ${to.name} ${ms.toFixed(0)} ms later ` +
        `(${to.name}: +${to.counts.deltas - before.deltas} 0x00 deltas, +${to.counts.wakes - before.wakes} wake-ups, ` +
        `+${to.counts.http - before.http} HTTP rounds, +${to.counts.rounds - before.rounds} socket round chunks)`,
    );
  } catch (err) {
    failed = true;
    console.error(String(err));
  }
}
for (const d of [a, b]) {
  console.log(`${d.name}: totals ${JSON.stringify(d.counts)}`);
  await d.client.close();
}
process.exit(failed ? 1 : 0);
