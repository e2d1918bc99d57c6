//! Races `set-if-absent` on shared keys; used by the multi-process test.
//!
//! Usage: `kv-race <bucket> <keys> <worker-id>`. For every key `k<i>` it
//! tries to claim it with its worker id as the value and prints `win k<i>`
//! for each key it won, then `done <wins>`.

use alk_guest::kv::Bucket;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, bucket, keys, worker] = args.as_slice() else {
        eprintln!("usage: kv-race <bucket> <keys> <worker-id>");
        std::process::exit(2);
    };
    let keys: u32 = keys.parse().expect("keys is a number");
    let bucket = Bucket::open(bucket).expect("open bucket");
    let mut wins = 0;
    for i in 0..keys {
        let key = format!("k{i}");
        match bucket.set_if_absent(&key, worker.as_bytes(), None) {
            Ok(true) => {
                wins += 1;
                println!("win {key}");
            }
            Ok(false) => {}
            Err(e) => {
                eprintln!("set-if-absent {key}: {e}");
                std::process::exit(1);
            }
        }
    }
    println!("done {wins}");
}
