// A small app that remembers: a visit counter kept in an alk bucket, so
// every run sees what earlier runs (and other processes) wrote.

import { Bucket } from 'alk:store/kv@0.1.4';

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function hello() {
  const bucket = Bucket.open('hello-js');
  // The first run ever claims the "since" key; later runs lose the race.
  // A TTL is a BigInt (`60000n`); `undefined` means none.
  const first = bucket.setIfAbsent('since', encoder.encode(String(Date.now())), undefined);
  const stored = bucket.get('visits'); // bytes, or undefined when absent
  const visits = (stored === undefined ? 0 : Number(decoder.decode(stored))) + 1;
  bucket.set('visits', encoder.encode(String(visits)), undefined);

  console.log('Hello from JavaScript!');
  if (first) {
    console.log('This is the first run; alk will remember it.');
  } else {
    console.log(`This app has now run ${visits} times.`);
  }
}

export const run = {
  run() {
    try {
      hello();
    } catch (e) {
      // An alk error carries its case in `payload`: {tag: 'busy', val: '…'}.
      const why = e.payload ? `${e.payload.tag}: ${JSON.stringify(e.payload.val)}` : e;
      console.error(`hello: ${why}`);
      // A `run` that throws fails: the component exits with status 1.
      throw e;
    }
  },
};
