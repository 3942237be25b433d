// Differential harness for the Go Yjs merger (see merge_diff_test.go).
// Runs under node with the reference yjs package from YJS_DIR:
//
//   node yjsdiff.cjs gen N SEED OUT   write N random edit histories to OUT
//                                     (JSON lines: the per-client updates and
//                                     Yjs's own merge of them)
//   node yjsdiff.cjs check GEN GOT    apply each line of GOT (the Go merge of
//                                     the same line of GEN) to a fresh Y.Doc and
//                                     compare document and state vector with
//                                     Yjs's merge; print a JSON summary
//   node yjsdiff.cjs bench GEN ROUNDS time Y.mergeUpdates on the same inputs
'use strict'

const fs = require('fs')
const path = require('path')
const Y = require(path.join(process.env.YJS_DIR, 'node_modules', 'yjs'))

// mulberry32: a small seeded generator, so a failing seed replays.
function prng (seed) {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

const hex = (u8) => Buffer.from(u8).toString('hex')
const unhex = (s) => new Uint8Array(Buffer.from(s, 'hex'))

const PIECES = ['a', 'bc', 'hello', ' ', '\u00e9', '\u{1F600}', 'x\u{1F680}y', '\n', 'zz']
const KEYS = ['a', 'b', 'c', 'd']

function generator (rand) {
  const int = (n) => Math.floor(rand() * n)
  const pick = (xs) => xs[int(xs.length)]
  const text = () => {
    let s = ''
    for (let i = 1 + int(3); i > 0; i--) s += pick(PIECES)
    return s
  }
  const plain = (depth) => {
    switch (int(depth > 1 ? 6 : 8)) {
      case 0: return int(1000) - 500
      case 1: return rand() * 10
      case 2: return text()
      case 3: return rand() < 0.5
      case 4: return null
      case 5: return new Uint8Array([int(256), int(256)])
      case 6: return { k: plain(depth + 1), n: int(9) }
      default: return [plain(depth + 1), plain(depth + 1)]
    }
  }
  // A value for a map or array slot: plain data or a nested shared type.
  const value = () => {
    switch (int(10)) {
      case 0: { const t = new Y.Text(); t.insert(0, text()); return t }
      case 1: { const a = new Y.Array(); a.insert(0, [plain(0)]); return a }
      case 2: { const m = new Y.Map(); m.set('x', plain(0)); return m }
      case 3: return new Y.Doc()
      default: return plain(0)
    }
  }
  // Nested shared types reachable from the roots, to edit in place.
  const nested = (doc) => {
    const out = []
    const walk = (v, depth) => {
      if (depth > 3) return
      if (v instanceof Y.Text) out.push(v)
      else if (v instanceof Y.Array) { out.push(v); v.forEach((c) => walk(c, depth + 1)) } else if (v instanceof Y.Map) { out.push(v); v.forEach((c) => walk(c, depth + 1)) }
    }
    doc.getMap('m').forEach((v) => walk(v, 0))
    doc.getArray('a').forEach((v) => walk(v, 0))
    return out
  }
  const editText = (t) => {
    const len = t.length
    const r = int(10)
    if (r < 5 || len === 0) {
      t.insert(int(len + 1), text(), rand() < 0.2 ? { bold: true } : undefined)
    } else if (r < 8) {
      const at = int(len)
      t.delete(at, 1 + int(Math.min(4, len - at)))
    } else if (r < 9) {
      const at = int(len)
      t.format(at, 1 + int(len - at), { italic: rand() < 0.7 ? true : null })
    } else {
      t.insertEmbed(int(len + 1), { img: int(9) })
    }
  }
  const editArray = (a) => {
    const len = a.length
    if (len === 0 || int(3) > 0) {
      const vs = []
      for (let i = 1 + int(3); i > 0; i--) vs.push(value())
      a.insert(int(len + 1), vs)
    } else {
      const at = int(len)
      a.delete(at, 1 + int(Math.min(3, len - at)))
    }
  }
  const editMap = (m) => {
    if (m.size > 0 && int(4) === 0) m.delete(pick(Array.from(m.keys())))
    else m.set(pick(KEYS), value())
  }
  const editXml = (x) => {
    if (x.length > 0 && int(3) === 0) {
      const el = x.get(int(x.length))
      if (el instanceof Y.XmlElement) el.setAttribute('k', String(int(9)))
      else x.delete(int(x.length), 1)
    } else {
      const el = new Y.XmlElement(pick(['p', 'h1']))
      el.insert(0, [new Y.XmlText(text())])
      x.insert(int(x.length + 1), [el])
    }
  }
  const edit = (doc) => {
    const r = int(12)
    if (r < 4) editText(doc.getText('t'))
    else if (r < 6) editMap(doc.getMap('m'))
    else if (r < 8) editArray(doc.getArray('a'))
    else if (r < 9) editXml(doc.getXmlFragment('x'))
    else {
      const ns = nested(doc)
      if (ns.length === 0) return editText(doc.getText('t'))
      const n = pick(ns)
      if (n instanceof Y.Text) editText(n)
      else if (n instanceof Y.Array) editArray(n)
      else editMap(n)
    }
  }
  return { int, pick, edit, rand }
}

// One random history: several clients editing, syncing now and then,
// inserting concurrently at one position; the updates it yields (each
// local transaction's update, plus some full states, diffs and Yjs merges
// of subsets) in the order produced.
function history (rand) {
  const g = generator(rand)
  const n = 2 + g.int(3)
  const docs = []
  const updates = []
  for (let i = 0; i < n; i++) {
    const doc = new Y.Doc({ gc: rand() < 0.7 })
    doc.clientID = 1 + g.int(0x7fffffff)
    doc.on('update', (u, origin) => { if (origin !== 'remote') updates.push(u) })
    docs.push(doc)
  }
  const sync = (to, from) => {
    Y.applyUpdate(to, Y.encodeStateAsUpdate(from, Y.encodeStateVector(to)), 'remote')
  }
  for (let step = 4 + g.int(20); step > 0; step--) {
    const r = g.int(10)
    if (r < 6) {
      const doc = g.pick(docs)
      doc.transact(() => { for (let k = 1 + g.int(3); k > 0; k--) g.edit(doc) })
    } else if (r < 8) {
      sync(g.pick(docs), g.pick(docs))
    } else if (r < 9) {
      // Everyone in sync, then all insert at one position concurrently.
      for (const a of docs) for (const b of docs) if (a !== b) sync(a, b)
      const at = g.int(docs[0].getText('t').length + 1)
      for (const doc of docs) doc.getText('t').insert(at, g.pick(['A', 'BB', '\u{1F600}']))
    } else {
      const doc = g.pick(docs)
      const other = g.pick(docs)
      const extra = g.int(3)
      if (extra === 0) updates.push(Y.encodeStateAsUpdate(doc))
      else if (extra === 1) updates.push(Y.encodeStateAsUpdate(doc, Y.encodeStateVector(other)))
      else if (updates.length > 1) {
        const from = g.int(updates.length)
        updates.push(Y.mergeUpdates(updates.slice(from, from + 1 + g.int(4))))
      }
    }
  }
  for (const doc of docs) doc.destroy()
  return updates
}

// Plain JSON of a document: every root the generator uses, with formatting
// (toDelta) for the text, subdocuments by guid and bytes as hex.
function snapshot (doc) {
  const plainOf = (v) => {
    if (v instanceof Y.Text) return { text: v.toDelta().map((d) => ({ ...d, insert: plainOf(d.insert) })) }
    if (v instanceof Y.XmlFragment || v instanceof Y.XmlElement || v instanceof Y.XmlText) return { xml: v.toString() }
    if (v instanceof Y.Array) return v.toArray().map(plainOf)
    if (v instanceof Y.Map) {
      const o = {}
      for (const k of Array.from(v.keys()).sort()) o[k] = plainOf(v.get(k))
      return { map: o }
    }
    if (v instanceof Y.Doc) return { doc: v.guid }
    if (v instanceof Uint8Array) return { bytes: hex(v) }
    if (Array.isArray(v)) return v.map(plainOf)
    if (v !== null && typeof v === 'object') {
      const o = {}
      for (const k of Object.keys(v).sort()) o[k] = plainOf(v[k])
      return o
    }
    return v
  }
  return JSON.stringify({
    t: plainOf(doc.getText('t')),
    m: plainOf(doc.getMap('m')),
    a: plainOf(doc.getArray('a')),
    x: plainOf(doc.getXmlFragment('x'))
  })
}

function load (update) {
  const doc = new Y.Doc()
  Y.applyUpdate(doc, update)
  const pending = doc.store.pendingStructs !== null || doc.store.pendingDs !== null
  const out = { json: snapshot(doc), sv: hex(Y.encodeStateVector(doc)), pending }
  doc.destroy()
  return out
}

function gen (count, seed, out) {
  const rand = prng(seed)
  const lines = []
  for (let i = 0; i < count; i++) {
    const updates = history(rand)
    const doc = new Y.Doc()
    for (const u of updates) Y.applyUpdate(doc, u)
    const merged = Y.encodeStateAsUpdate(doc)
    doc.destroy()
    lines.push(JSON.stringify({ u: updates.map(hex), m: hex(merged) }))
  }
  fs.writeFileSync(out, lines.join('\n') + '\n')
}

function check (genFile, gotFile) {
  const want = fs.readFileSync(genFile, 'utf8').trim().split('\n')
  const got = fs.readFileSync(gotFile, 'utf8').trim().split('\n')
  if (want.length !== got.length) throw new Error(`${want.length} histories but ${got.length} merges`)
  const failures = []
  for (let i = 0; i < want.length; i++) {
    const w = load(unhex(JSON.parse(want[i]).m))
    let g
    try {
      g = load(unhex(got[i]))
    } catch (e) {
      failures.push({ line: i, why: 'Yjs cannot apply the Go merge: ' + e.message })
      continue
    }
    if (g.pending) failures.push({ line: i, why: 'the Go merge leaves pending structs or deletes' })
    else if (g.json !== w.json) failures.push({ line: i, why: 'document differs', want: w.json, got: g.json })
    else if (g.sv !== w.sv) failures.push({ line: i, why: 'state vector differs', want: w.sv, got: g.sv })
    if (failures.length >= 5) break
  }
  process.stdout.write(JSON.stringify({ checked: want.length, failures }) + '\n')
}

function bench (genFile, rounds) {
  const lines = fs.readFileSync(genFile, 'utf8').trim().split('\n').map((l) => JSON.parse(l))
  const histories = lines.map((l) => l.u.map(unhex))
  // The engine's case: the stored document (Yjs's merge of the history)
  // and one pushed update (the history's last).
  const pushes = lines.filter((l) => l.u.length > 0).map((l) => [unhex(l.m), unhex(l.u[l.u.length - 1])])
  let updates = 0
  for (const us of histories) updates += us.length
  for (const us of histories.slice(0, 200)) Y.mergeUpdates(us) // warm the JIT
  let t0 = process.hrtime.bigint()
  for (let r = 0; r < rounds; r++) for (const us of histories) Y.mergeUpdates(us)
  const ns = Number(process.hrtime.bigint() - t0)
  t0 = process.hrtime.bigint()
  for (let r = 0; r < rounds; r++) for (const p of pushes) Y.mergeUpdates(p)
  const pushNs = Number(process.hrtime.bigint() - t0)
  process.stdout.write(JSON.stringify({ histories: histories.length, updates, rounds, nsPerUpdate: ns / (updates * rounds), nsPerPush: pushNs / (pushes.length * rounds) }) + '\n')
}

const [mode, a, b, c] = process.argv.slice(2)
if (mode === 'gen') gen(Number(a), Number(b), c)
else if (mode === 'check') check(a, b)
else if (mode === 'bench') bench(a, Number(b))
else throw new Error('usage: yjsdiff.cjs gen|check|bench ...')
