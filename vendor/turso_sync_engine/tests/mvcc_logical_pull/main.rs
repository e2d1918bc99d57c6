mod fresh_bootstrap;
mod harness;
mod schema_changes;
