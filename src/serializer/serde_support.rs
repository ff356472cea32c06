//! Serializers for user types through serde.
