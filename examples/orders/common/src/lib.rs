//! What the pieces of the orders example share: the names of the stores
//! they use, the order format, and the rule that makes some orders fail on
//! purpose. No alk calls here: the HTTP handler and the command guests
//! bind the alk interfaces themselves.

use serde_json::{Value, json};

/// The work queue the HTTP handler sends orders to; one group per customer.
pub const ORDERS_QUEUE: &str = "orders";
/// The stream every placed order is published to (`order-placed` events).
pub const EVENTS_STREAM: &str = "order-events";
/// The queue the schedule sends report jobs to.
pub const REPORTS_QUEUE: &str = "reports";
/// The schedule that sends them.
pub const REPORT_SCHEDULE: &str = "orders-report";
/// Order id → the record of its processing, written once (set-if-absent).
pub const PROCESSED_BUCKET: &str = "orders-processed";
/// Worker name → what that worker did (each worker writes only its own key).
pub const WORKERS_BUCKET: &str = "orders-workers";
/// The projection: `customer/<name>` → totals, and `offset` → the last
/// event applied, written together.
pub const TOTALS_BUCKET: &str = "orders-totals";
/// Report job id → the report the worker wrote for it.
pub const REPORTS_BUCKET: &str = "orders-reports";
/// The lock that keeps the projection to one process at a time.
pub const PROJECTION_LOCK: &str = "orders-projection";
/// The projection's consumer name in the stream (for its lag in `inspect`
/// and the dashboard).
pub const PROJECTION_CONSUMER: &str = "totals";

/// Deliveries after which an order goes to the dead letters.
pub const MAX_ATTEMPTS: u32 = 3;
/// The base of the retry backoff, in milliseconds: a failed order is due
/// again after 50–100 ms, then 100–200 ms.
pub const BACKOFF_BASE_MS: u64 = 100;

/// An order as the HTTP handler takes it and the queue carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    /// `o-0001`, …: 1 to 64 characters of `A-Z a-z 0-9 - _`.
    pub id: String,
    /// The customer (also the queue group): same characters.
    pub customer: String,
    /// In cents, 1 to 1,000,000,000.
    pub amount: u64,
}

fn valid_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Order {
    /// Parses `{"id": "o-0001", "customer": "ada", "amount": 1250}`; the
    /// error says what is wrong.
    pub fn parse(body: &[u8]) -> Result<Order, String> {
        let v: Value = serde_json::from_slice(body).map_err(|e| {
            format!(
                "the body is not JSON ({e}); send {{\"id\": \"o-1\", \"customer\": \"ada\", \"amount\": 1250}}"
            )
        })?;
        let text = |field: &str| -> Result<String, String> {
            match v.get(field).and_then(Value::as_str) {
                Some(s) if valid_name(s) => Ok(s.to_string()),
                Some(s) => Err(format!(
                    "{field} {s:?} must be 1 to 64 characters of A-Z a-z 0-9 - _"
                )),
                None => Err(format!("{field} is missing (a string)")),
            }
        };
        let id = text("id")?;
        let customer = text("customer")?;
        let amount = match v.get("amount").and_then(Value::as_u64) {
            Some(a) if (1..=1_000_000_000).contains(&a) => a,
            _ => {
                return Err(
                    "amount must be a whole number of cents from 1 to 1000000000".to_string(),
                );
            }
        };
        Ok(Order {
            id,
            customer,
            amount,
        })
    }

    /// The order as JSON, as the queue message and the event carry it.
    pub fn to_json(&self) -> String {
        json!({"id": self.id, "customer": self.customer, "amount": self.amount}).to_string()
    }

    /// The `order-placed` event published for it.
    pub fn placed_event(&self) -> String {
        json!({"event": "order-placed", "id": self.id, "customer": self.customer, "amount": self.amount})
            .to_string()
    }

    /// What happens when a worker processes it (see [`fate`]).
    pub fn fate(&self) -> Fate {
        fate(&self.id)
    }
}

/// How processing an order goes, decided by its id so that a run can be
/// checked: orders whose number ends in 7 are declined every time (they
/// end in the dead letters), orders whose number leaves 3 divided by 5
/// fail their first attempt (a payment service timing out) and succeed on
/// the retry, the others succeed at once. Ids without a number succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    Succeeds,
    FailsOnce,
    AlwaysFails,
}

/// The [`Fate`] of the order `id`.
pub fn fate(id: &str) -> Fate {
    let digits: String = id
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    match digits.parse::<u64>() {
        Ok(n) if n % 10 == 7 => Fate::AlwaysFails,
        Ok(n) if n % 5 == 3 => Fate::FailsOnce,
        _ => Fate::Succeeds,
    }
}

/// Processing attempt `attempt` (1 for the first) of `order`: `Err` with
/// the reason the worker reports when it fails.
pub fn process(order: &Order, attempt: u32) -> Result<(), String> {
    match order.fate() {
        Fate::AlwaysFails => Err(format!(
            "card declined for {} (attempt {attempt} of {MAX_ATTEMPTS})",
            order.customer
        )),
        Fate::FailsOnce if attempt == 1 => Err("payment service timed out".to_string()),
        _ => Ok(()),
    }
}

/// Parses a JSON object's field as `u64` (0 when absent).
pub fn field_u64(v: &Value, name: &str) -> u64 {
    v.get(name).and_then(Value::as_u64).unwrap_or(0)
}

/// Parses bytes as a JSON value (`Null` when they are not JSON).
pub fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or(Value::Null)
}

/// Unix epoch milliseconds, now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fates_follow_the_order_number() {
        assert_eq!(fate("o-0007"), Fate::AlwaysFails);
        assert_eq!(fate("o-0017"), Fate::AlwaysFails);
        assert_eq!(fate("o-0003"), Fate::FailsOnce);
        assert_eq!(fate("o-0008"), Fate::FailsOnce);
        assert_eq!(fate("o-0001"), Fate::Succeeds);
        assert_eq!(fate("custom"), Fate::Succeeds);
    }

    #[test]
    fn orders_round_trip() {
        let o = Order::parse(br#"{"id":"o-1","customer":"ada","amount":1250}"#).unwrap();
        assert_eq!(Order::parse(o.to_json().as_bytes()).unwrap(), o);
        assert!(Order::parse(b"{}").is_err());
        assert!(Order::parse(br#"{"id":"o 1","customer":"ada","amount":1}"#).is_err());
        assert!(Order::parse(br#"{"id":"o-1","customer":"ada","amount":0}"#).is_err());
    }
}
