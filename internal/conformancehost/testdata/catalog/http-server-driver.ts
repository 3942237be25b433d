/**
 * ServerDriver shim: drives a conformance-host (cmd/conformance-host) over
 * HTTP so the Syncular conformance catalog can run against the Go engine.
 * Copied next to the catalog's src/ by run.sh; imports resolve there.
 */
import type {
  BlobDownloadResult,
  BlobUploadGrantResult,
  BytesResult,
  CommitValidatorInstallSpec,
  DriverError,
  DriverScopeMap,
  RealtimeConnectResult,
  RealtimeSink,
  RetentionOptions,
  ServerCapability,
  ServerCreateOptions,
  ServerDriver,
  ServerInstance,
  ServerRowState,
  ValidatorInstallSpec,
} from '../src/driver';

const SYNC_CONTENT_TYPE = 'application/vnd.syncular.sync.v2';

function toU8(bytes: Uint8Array): { $u8: string } {
  return { $u8: Buffer.from(bytes).toString('base64') };
}

function fromU8(value: { $u8: string }): Uint8Array {
  return new Uint8Array(Buffer.from(value.$u8, 'base64'));
}

interface WireBytesResult {
  ok: boolean;
  bytes?: { $u8: string };
  error?: DriverError;
}

function bytesResult(r: WireBytesResult): BytesResult {
  if (r.ok && r.bytes !== undefined) return { ok: true, bytes: fromU8(r.bytes) };
  return {
    ok: false,
    error: r.error ?? { code: 'sync.internal', message: 'no error body' },
  };
}

/** Turn a non-2xx §10.1 JSON response into a DriverError. */
async function httpError(res: Response): Promise<DriverError> {
  const text = await res.text();
  try {
    const body = JSON.parse(text) as Partial<DriverError>;
    if (typeof body.code === 'string') {
      return {
        code: body.code,
        message: body.message ?? '',
        ...(body.category !== undefined ? { category: body.category } : {}),
        ...(body.retryable !== undefined ? { retryable: body.retryable } : {}),
        ...(body.recommendedAction !== undefined
          ? { recommendedAction: body.recommendedAction }
          : {}),
      };
    }
  } catch {
    // fall through
  }
  return { code: 'sync.internal', message: `HTTP ${res.status}: ${text}` };
}

class HttpServerInstance implements ServerInstance {
  readonly #base: string;
  readonly #id: string;

  constructor(hostUrl: string, id: string, methods: readonly string[]) {
    this.#base = `${hostUrl}/i/${id}`;
    this.#id = id;
    // Optional driver methods exist only when the host implements them.
    const optional = [
      'fetchSegmentUrl',
      'setSignedUrlTtlSeconds',
      'captureBackup',
      'restoreBackup',
      'failNextIdempotencyLookup',
      'declareBackfillCheckpoint',
      'uploadBlob',
      'downloadBlob',
      'fetchBlobUrl',
      'uploadBlobGrant',
      'putBlobUrl',
      'setBlobPresign',
      'installValidators',
      'installCommitValidator',
    ] as const;
    for (const name of optional) {
      if (!methods.includes(name)) {
        (this as Record<string, unknown>)[name] = undefined;
      }
    }
  }

  async #control<T>(method: string, ...args: unknown[]): Promise<T> {
    const res = await fetch(`${this.#base}/control/${method}`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(args),
    });
    const body = (await res.json()) as {
      result?: T;
      error?: { code: string; message: string };
    };
    if (!res.ok || body.error !== undefined) {
      throw new Error(
        `conformance-host ${this.#id}.${method}: ${body.error?.code}: ${body.error?.message}`,
      );
    }
    return body.result as T;
  }

  async handleSyncRequest(
    actorId: string,
    request: Uint8Array,
  ): Promise<BytesResult> {
    const res = await fetch(`${this.#base}/sync`, {
      method: 'POST',
      headers: { 'Content-Type': SYNC_CONTENT_TYPE, 'X-Actor': actorId },
      body: request,
    });
    if (!res.ok) return { ok: false, error: await httpError(res) };
    return { ok: true, bytes: new Uint8Array(await res.arrayBuffer()) };
  }

  async downloadSegment(
    actorId: string,
    segmentId: string,
    scopesHeaderJson: string,
  ): Promise<BytesResult> {
    const res = await fetch(
      `${this.#base}/segments/${encodeURIComponent(segmentId)}`,
      {
        headers: { 'X-Actor': actorId, 'X-Syncular-Scopes': scopesHeaderJson },
      },
    );
    if (!res.ok) return { ok: false, error: await httpError(res) };
    return { ok: true, bytes: new Uint8Array(await res.arrayBuffer()) };
  }

  async fetchSegmentUrl(url: string): Promise<BytesResult> {
    return bytesResult(
      await this.#control<WireBytesResult>('fetchSegmentUrl', url),
    );
  }

  async setSignedUrlTtlSeconds(ttlSeconds: number): Promise<void> {
    await this.#control('setSignedUrlTtlSeconds', ttlSeconds);
  }

  // §5.9 blobs: bytes cross the control channel as {$u8} values.
  async uploadBlob(
    actorId: string,
    blobId: string,
    bytes: Uint8Array,
    mediaType?: string,
  ): Promise<{ ok: true } | { ok: false; error: DriverError }> {
    const r = await this.#control<{ ok: boolean; error?: DriverError }>(
      'uploadBlob',
      actorId,
      blobId,
      toU8(bytes),
      mediaType ?? null,
    );
    return r.ok
      ? { ok: true }
      : { ok: false, error: r.error ?? { code: 'sync.internal', message: '' } };
  }

  async downloadBlob(
    actorId: string,
    blobId: string,
  ): Promise<BlobDownloadResult> {
    const r = await this.#control<
      WireBytesResult & { url?: string; urlExpiresAtMs?: number }
    >('downloadBlob', actorId, blobId);
    if (r.ok && r.url !== undefined) {
      return {
        ok: true,
        url: r.url,
        ...(r.urlExpiresAtMs !== undefined
          ? { urlExpiresAtMs: r.urlExpiresAtMs }
          : {}),
      };
    }
    return bytesResult(r);
  }

  async fetchBlobUrl(url: string): Promise<BytesResult> {
    return bytesResult(await this.#control<WireBytesResult>('fetchBlobUrl', url));
  }

  async uploadBlobGrant(
    actorId: string,
    blobId: string,
    byteLength: number,
    mediaType?: string,
  ): Promise<BlobUploadGrantResult> {
    return this.#control<BlobUploadGrantResult>(
      'uploadBlobGrant',
      actorId,
      blobId,
      byteLength,
      mediaType ?? null,
    );
  }

  async putBlobUrl(
    url: string,
    bytes: Uint8Array,
  ): Promise<{ ok: true } | { ok: false; error: DriverError }> {
    const r = await this.#control<{ ok: boolean; error?: DriverError }>(
      'putBlobUrl',
      url,
      toU8(bytes),
    );
    return r.ok
      ? { ok: true }
      : { ok: false, error: r.error ?? { code: 'sync.internal', message: '' } };
  }

  async setBlobPresign(enabled: boolean): Promise<void> {
    await this.#control('setBlobPresign', enabled);
  }

  /** §8.1 attach over a real WebSocket to the host's /realtime route;
   * the actor travels in the query like X-Actor does for /sync. */
  connectRealtime(
    actorId: string,
    clientId: string,
    sink: RealtimeSink,
  ): Promise<RealtimeConnectResult> {
    const url = `${this.#base.replace(/^http/, 'ws')}/realtime?clientId=${encodeURIComponent(clientId)}&actor=${encodeURIComponent(actorId)}`;
    return new Promise((resolve) => {
      const socket = new WebSocket(url);
      socket.binaryType = 'arraybuffer';
      // Settle on the server's hello (§8.1), not on the socket opening:
      // an in-process server hands the hello to the sink during connect,
      // and scenarios read the session state right after it returns.
      let settled = false;
      const connection = {
        send: (text: string) => socket.send(text),
        sendBinary: (bytes: Uint8Array) => socket.send(bytes),
        close: () => socket.close(),
      };
      socket.onmessage = (event: MessageEvent) => {
        if (typeof event.data === 'string') sink.onText(event.data);
        else sink.onBinary(new Uint8Array(event.data as ArrayBuffer));
        if (!settled) {
          settled = true;
          resolve({ ok: true, connection });
        }
      };
      socket.onclose = () => {
        if (!settled) {
          settled = true;
          resolve({
            ok: false,
            error: {
              code: 'sync.invalid_client_id',
              message: 'conformance-host refused the realtime connect',
            },
          });
          return;
        }
        sink.onClose?.();
      };
      socket.onerror = () => {
        // onclose follows and settles the promise.
      };
    });
  }

  async setAllowedScopes(
    actorId: string,
    allowed: DriverScopeMap,
  ): Promise<void> {
    await this.#control('setAllowedScopes', actorId, allowed);
  }

  async installValidators(
    specs: readonly ValidatorInstallSpec[],
  ): Promise<void> {
    await this.#control('installValidators', specs);
  }

  async installCommitValidator(
    spec?: CommitValidatorInstallSpec,
  ): Promise<void> {
    await this.#control('installCommitValidator', spec ?? null);
  }

  async setResolverFailing(failing: boolean): Promise<void> {
    await this.#control('setResolverFailing', failing);
  }

  // §7.3.3: the resolver signals an outage (not a throw).
  async setResolverOutage(outage: boolean): Promise<void> {
    await this.#control('setResolverOutage', outage);
  }

  // §7.3.4: revoke a lease by id.
  async revokeLease(leaseId: string): Promise<void> {
    await this.#control('revokeLease', leaseId);
  }

  async advanceClock(ms: number): Promise<void> {
    await this.#control('advanceClock', ms);
  }

  async nowMs(): Promise<number> {
    return this.#control<number>('nowMs');
  }

  async captureBackup(): Promise<void> {
    await this.#control('captureBackup');
  }

  async restoreBackup(): Promise<void> {
    await this.#control('restoreBackup');
  }

  async prune(retention?: RetentionOptions): Promise<number> {
    return retention === undefined
      ? this.#control<number>('prune')
      : this.#control<number>('prune', retention);
  }

  async getMaxCommitSeq(): Promise<number> {
    return this.#control<number>('getMaxCommitSeq');
  }

  async getHorizonSeq(): Promise<number> {
    return this.#control<number>('getHorizonSeq');
  }

  async readRows(table: string): Promise<ServerRowState[]> {
    return this.#control<ServerRowState[]>('readRows', table);
  }

  async failNextIdempotencyLookup(): Promise<void> {
    await this.#control('failNextIdempotencyLookup');
  }

  async declareBackfillCheckpoint(name: string): Promise<void> {
    await this.#control('declareBackfillCheckpoint', name);
  }

  async close(): Promise<void> {
    await fetch(this.#base, { method: 'DELETE' });
  }
}

/** Build a ServerDriver for the conformance-host at hostUrl. */
export async function httpServerDriver(hostUrl: string): Promise<ServerDriver> {
  const info = (await (await fetch(`${hostUrl}/__conformance/info`)).json()) as {
    name: string;
    capabilities: ServerCapability[];
  };
  return {
    name: info.name,
    capabilities: info.capabilities,
    async create(options: ServerCreateOptions): Promise<ServerInstance> {
      const res = await fetch(`${hostUrl}/__conformance/instances`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify(options),
      });
      const body = (await res.json()) as {
        id?: string;
        methods?: string[];
        error?: { code: string; message: string };
      };
      if (!res.ok || body.id === undefined) {
        throw new Error(
          `conformance-host create: ${body.error?.code}: ${body.error?.message}`,
        );
      }
      return new HttpServerInstance(hostUrl, body.id, body.methods ?? []);
    },
  };
}
