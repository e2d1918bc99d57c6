// The localkv.v1 contract, checked from a JavaScript guest.
//
// The same cases, in the same order and with the same names, as the Rust
// guest beside it (../rust); ../README.md says what each case expects.
// Prints `ok <case>` per passing case and `N passed, 0 failed` at the end;
// on the first failure prints `FAIL <case>: <why>` and exits with status 1
// (`run` throws, which the component reports as failure).
//
// Bindings: `u64` is a BigInt, `option<T>` is `T` or `undefined`, bytes are
// a Uint8Array, and an alk error is thrown with `payload = {tag, val}`.

import { Bucket } from 'alk:store/kv@0.1.4';

const MIB = 1024 * 1024;
const utf8 = new TextEncoder();

class CaseFailed extends Error {}

// Bytes from the host are Uint8Arrays of the bindings' own realm, so
// `instanceof Uint8Array` is false for them.
function isBytes(v) {
  return Object.prototype.toString.call(v) === '[object Uint8Array]';
}

function ensure(cond, why = 'condition is false') {
  if (!cond) {
    throw new CaseFailed(why);
  }
}

// Text for a failure message: bytes as text where they are short.
function show(v) {
  if (isBytes(v)) {
    return v.length <= 64 ? JSON.stringify(new TextDecoder().decode(v)) : `<${v.length} bytes>`;
  }
  if (Array.isArray(v)) {
    return `[${v.map(show).join(', ')}]`;
  }
  if (typeof v === 'bigint') {
    return `${v}`;
  }
  if (v !== null && typeof v === 'object') {
    return `{${Object.entries(v).map(([k, x]) => `${k}: ${show(x)}`).join(', ')}}`;
  }
  return v === undefined ? 'none' : JSON.stringify(v);
}

// An alk error as `tag(value)`, anything else as its message.
function describe(e) {
  if (e?.payload?.tag !== undefined) {
    return `${e.payload.tag}(${show(e.payload.val)})`;
  }
  return e instanceof Error ? e.message : String(e);
}

function sameBytes(a, b) {
  return isBytes(a) && a.length === b.length && a.every((x, i) => x === b[i]);
}

// Fails unless `value` is the bytes of `want` (a string or bytes).
function ensureBytes(value, want) {
  const w = typeof want === 'string' ? utf8.encode(want) : want;
  ensure(sameBytes(value, w), `expected ${show(w)}, got ${show(value)}`);
}

// Calls `fn` and expects the alk error `tag`; its value.
function raises(tag, fn) {
  let value;
  try {
    value = fn();
  } catch (e) {
    ensure(e?.payload?.tag === tag, `expected ${tag}, got ${describe(e)}`);
    return e.payload.val;
  }
  throw new CaseFailed(`expected ${tag}, got ${show(value)}`);
}

// Waits until a key set now with `ttlMs` has expired by the host's clock.
// The world has no clock import, so this spins on `Date.now()`.
function outlive(ttlMs) {
  const until = Date.now() + ttlMs + 5;
  while (Date.now() < until) {
    // spin
  }
}

function keys(page) {
  return page.entries.map((e) => e.key);
}

function sameKeys(page, want) {
  const got = keys(page);
  ensure(JSON.stringify(got) === JSON.stringify(want), `expected ${show(want)}, got ${show(got)}`);
}

class Contract {
  constructor() {
    this.passed = 0;
  }

  case(name, fn) {
    try {
      fn();
    } catch (e) {
      // A failed check or an unexpected alk error.
      console.log(`FAIL ${name}: ${describe(e)}`);
      throw new Error(`contract case ${name} failed`);
    }
    this.passed += 1;
    console.log(`ok ${name}`);
  }

  finish() {
    console.log(`${this.passed} passed, 0 failed`);
  }
}

function contract() {
  const c = new Contract();
  // A bucket of its own, so runs on a shared data directory never meet.
  const name = `contract-js-${Date.now()}-${Math.floor(Math.random() * 1e9)}`;
  const b = Bucket.open(name);

  c.case('open-returns-named-bucket', () => {
    ensure(b.name() === name, `name() is ${show(b.name())}`);
  });
  c.case('get-absent-is-none', () => {
    const got = b.get('missing');
    ensure(got === undefined, `got ${show(got)}`);
  });
  c.case('set-then-get', () => {
    b.set('a', utf8.encode('1'), undefined);
    ensureBytes(b.get('a'), '1');
  });
  c.case('set-overwrites-value', () => {
    b.set('a', utf8.encode('2'), undefined);
    ensureBytes(b.get('a'), '2');
  });
  c.case('set-without-ttl-clears-ttl', () => {
    b.set('ttl-cleared', utf8.encode('x'), 30n);
    b.set('ttl-cleared', utf8.encode('y'), undefined);
    outlive(30);
    ensureBytes(b.get('ttl-cleared'), 'y');
  });
  c.case('binary-and-empty-values-round-trip', () => {
    const all = Uint8Array.from({ length: 256 }, (_, i) => i);
    b.set('bin', all, undefined);
    ensureBytes(b.get('bin'), all);
    b.set('empty', new Uint8Array(0), undefined);
    ensureBytes(b.get('empty'), new Uint8Array(0));
  });
  c.case('unicode-keys-round-trip', () => {
    b.set('ключ/日本/🔑', utf8.encode('u'), undefined);
    ensureBytes(b.get('ключ/日本/🔑'), 'u');
  });
  c.case('set-if-absent-wins-on-absent-key', () => {
    ensure(b.setIfAbsent('once', utf8.encode('first'), undefined) === true, 'set-if-absent lost');
    ensureBytes(b.get('once'), 'first');
  });
  c.case('set-if-absent-loses-on-live-key', () => {
    ensure(b.setIfAbsent('once', utf8.encode('second'), undefined) === false, 'set-if-absent won');
    ensureBytes(b.get('once'), 'first');
  });
  c.case('set-if-absent-loses-on-unexpired-ttl-key', () => {
    b.set('lease', utf8.encode('holder-1'), 60000n);
    ensure(b.setIfAbsent('lease', utf8.encode('holder-2'), undefined) === false, 'set-if-absent won');
    ensureBytes(b.get('lease'), 'holder-1');
  });
  c.case('expired-key-reads-absent', () => {
    // Only what holds however slow the machine is (see the Rust case).
    b.set('short', utf8.encode('x'), 20n);
    outlive(20);
    const got = b.get('short');
    ensure(got === undefined, `got ${show(got)} after its TTL`);
  });
  c.case('exists-live-absent-expired', () => {
    b.set('here', utf8.encode('x'), undefined);
    ensure(b.exists('here') === true, 'a live key does not exist');
    ensure(b.exists('not-here') === false, 'an absent key exists');
    b.set('lasting', utf8.encode('x'), 600000n);
    ensure(b.exists('lasting') === true, 'a key does not exist before its TTL');
    b.set('fading', utf8.encode('x'), 20n);
    outlive(20);
    ensure(b.exists('fading') === false, 'an expired key exists');
  });
  c.case('set-if-absent-takes-over-expired-key', () => {
    ensure(b.setIfAbsent('takeover', utf8.encode('old'), 20n) === true, 'first set-if-absent lost');
    outlive(20);
    ensure(b.setIfAbsent('takeover', utf8.encode('new'), undefined) === true, 'lost on an expired key');
    ensureBytes(b.get('takeover'), 'new');
    // The new value has no TTL: it stays.
    ensure(b.setIfAbsent('takeover', utf8.encode('newer'), undefined) === false, 'won on a live key');
  });
  c.case('delete-removes-and-absent-delete-is-ok', () => {
    b.set('gone', utf8.encode('x'), undefined);
    b.delete('gone');
    ensure(b.get('gone') === undefined, 'still there after delete');
    b.delete('gone');
    b.delete('never-existed');
  });
  c.case('set-many-then-get-many', () => {
    b.setMany(['m1', 'm2', 'm3'].map((k) => ({ key: k, value: utf8.encode(k) })), undefined);
    const got = b.getMany(['m1', 'm2', 'missing', 'm3']);
    ensure(got.length === 4, `got ${show(got)}`);
    ensureBytes(got[0], 'm1');
    ensureBytes(got[1], 'm2');
    ensure(got[2] === undefined, `got ${show(got)}`);
    ensureBytes(got[3], 'm3');
  });
  c.case('set-many-is-all-or-nothing', () => {
    const entries = [
      { key: 'all-1', value: utf8.encode('x') },
      { key: 'all-2', value: new Uint8Array(MIB + 1) },
    ];
    raises('payload-too-large', () => b.setMany(entries, undefined));
    ensure(b.get('all-1') === undefined, 'part of a refused set-many was stored');
    const tooMany = Array.from({ length: 1001 }, (_, i) => ({ key: `n${i}`, value: new Uint8Array(0) }));
    raises('invalid-argument', () => b.setMany(tooMany, undefined));
    ensure(b.get('n0') === undefined, 'part of a refused set-many was stored');
  });
  c.case('handles-share-the-bucket', () => {
    const again = Bucket.open(name);
    again.set('shared', utf8.encode('s'), undefined);
    ensureBytes(b.get('shared'), 's');
  });
  c.case('buckets-are-isolated', () => {
    const other = Bucket.open(`${name}-other`);
    ensure(other.get('a') === undefined, 'a new bucket holds a key');
    other.set('a', utf8.encode('other'), undefined);
    ensureBytes(b.get('a'), '2');
  });

  // Scans run on a bucket of their own so the expected sets are exact.
  const s = Bucket.open(`${name}-scan`);
  c.case('scan-prefix-orders-by-key-and-filters-prefix', () => {
    for (const k of ['user:3', 'user:1', 'user:2', 'usex', 'user', 'admin:1', 'user:10']) {
      s.set(k, utf8.encode(k), undefined);
    }
    const page = s.scanPrefix('user:', undefined, 100);
    sameKeys(page, ['user:1', 'user:10', 'user:2', 'user:3']);
    ensure(page.entries.every((e) => sameBytes(e.value, utf8.encode(e.key))), 'a value is not its key');
    ensure(page.nextCursor === undefined, `cursor ${show(page.nextCursor)} on the last page`);
  });
  c.case('scan-empty-prefix-returns-every-key', () => {
    const page = s.scanPrefix('', undefined, 100);
    ensure(page.entries.length === 7, `got ${show(keys(page))}`);
    ensure(keys(page)[0] === 'admin:1', `got ${show(keys(page))}`);
  });
  c.case('scan-skips-expired-without-error', () => {
    s.set('user:4', utf8.encode('x'), 20n);
    outlive(20);
    const page = s.scanPrefix('user:', undefined, 100);
    ensure(!keys(page).includes('user:4'), 'an expired key was scanned');
    ensure(page.entries.length === 4, `got ${show(keys(page))}`);
  });
  c.case('scan-pages-with-cursor', () => {
    const seen = [];
    let cursor;
    let pages = 0;
    for (;;) {
      const page = s.scanPrefix('user:', cursor, 3);
      ensure(page.entries.length <= 3, `a page of ${page.entries.length} entries`);
      seen.push(...keys(page));
      pages += 1;
      ensure(pages < 10, 'scan does not end');
      if (page.nextCursor === undefined) {
        break;
      }
      cursor = page.nextCursor;
    }
    ensure(pages === 2, `pages = ${pages}`);
    ensure(
      JSON.stringify(seen) === JSON.stringify(['user:1', 'user:10', 'user:2', 'user:3']),
      `got ${show(seen)}`,
    );
  });
  c.case('scan-limit-zero-is-clamped-to-one', () => {
    const page = s.scanPrefix('user:', undefined, 0);
    ensure(page.entries.length === 1, `got ${show(keys(page))}`);
    ensure(page.nextCursor !== undefined, 'no cursor');
  });
  c.case('scan-prefix-without-matches-is-empty', () => {
    const page = s.scanPrefix('zzz', undefined, 10);
    ensure(page.entries.length === 0 && page.nextCursor === undefined, `got ${show(page)}`);
  });
  c.case('scan-rejects-foreign-cursors', () => {
    for (const bad of ['abc', '-1', '01', '', '1.5', '99999999999999999999999', '3']) {
      raises('invalid-argument', () => s.scanPrefix('user:', bad, 10));
    }
  });
  c.case('scan-cursor-is-bound-to-its-prefix', () => {
    const page = s.scanPrefix('user:', undefined, 1);
    ensure(page.nextCursor !== undefined, 'no cursor');
    for (const other of ['u', 'v']) {
      raises('invalid-argument', () => s.scanPrefix(other, page.nextCursor, 10));
    }
  });
  c.case('scan-pages-survive-concurrent-writes', () => {
    for (const k of ['w1', 'w2', 'w3', 'w4']) {
      s.set(k, utf8.encode(k), undefined);
    }
    const first = s.scanPrefix('w', undefined, 2);
    sameKeys(first, ['w1', 'w2']);
    ensure(first.nextCursor !== undefined, 'no cursor after the first page');
    // Before the cursor: a key removed and one added; after it: one added.
    s.delete('w1');
    s.set('w0', utf8.encode('w0'), undefined);
    s.set('w5', utf8.encode('w5'), undefined);
    const second = s.scanPrefix('w', first.nextCursor, 2);
    sameKeys(second, ['w3', 'w4']);
    ensure(second.nextCursor !== undefined, 'no cursor after the second page');
    const third = s.scanPrefix('w', second.nextCursor, 2);
    sameKeys(third, ['w5']);
    ensure(third.nextCursor === undefined, `cursor ${show(third.nextCursor)} on the last page`);
  });

  c.case('empty-key-is-invalid-argument', () => {
    raises('invalid-argument', () => b.set('', utf8.encode('x'), undefined));
    raises('invalid-argument', () => b.get(''));
  });
  c.case('nul-in-key-is-invalid-argument', () => {
    raises('invalid-argument', () => b.set('a\0b', utf8.encode('x'), undefined));
  });
  c.case('oversized-key-is-payload-too-large', () => {
    const t = raises('payload-too-large', () => b.set('k'.repeat(1025), utf8.encode('x'), undefined));
    ensure(t.size === 1025n && t.limit === 1024n, `got ${show(t)}`);
  });
  c.case('oversized-value-is-payload-too-large-and-writes-nothing', () => {
    const value = new Uint8Array(MIB + 1).fill(7);
    const t = raises('payload-too-large', () => b.set('big', value, undefined));
    ensure(t.limit === BigInt(MIB), `got ${show(t)}`);
    raises('payload-too-large', () => b.setIfAbsent('big', value, undefined));
    ensure(b.get('big') === undefined, 'a refused value was stored');
    // The largest allowed value is stored.
    b.set('big', value.subarray(0, MIB), undefined);
    const got = b.get('big');
    ensure(got !== undefined && got.length === MIB, `got ${show(got)}`);
  });
  c.case('zero-or-overflowing-ttl-is-invalid-argument', () => {
    raises('invalid-argument', () => b.set('t', utf8.encode('x'), 0n));
    raises('invalid-argument', () => b.set('t', utf8.encode('x'), 2n ** 64n - 1n));
    raises('invalid-argument', () => b.setIfAbsent('t', utf8.encode('x'), 0n));
    ensure(b.get('t') === undefined, 'a refused TTL stored the key');
  });
  c.case('bad-bucket-names-are-invalid-name', () => {
    const bad = ['', '.', '..', '.hidden', 'a/b', 'a\\b', 'a\0b', 'with space', 'ü', 'n'.repeat(101)];
    for (const n of bad) {
      raises('invalid-name', () => Bucket.open(n));
    }
    Bucket.open('b'.repeat(100));
  });
  c.case('reserved-bucket-name-is-reserved-name', () => {
    raises('reserved-name', () => Bucket.open('__alkstore_internal'));
  });
  c.finish();
}

export const run = {
  run() {
    contract();
  },
};
