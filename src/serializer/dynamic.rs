//! Decoding bytes to JSON from a serializer snapshot alone (for `dump`), for the built-in serializers.
