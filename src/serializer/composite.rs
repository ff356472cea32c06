//! Composite serializers (list, map, option) built from element serializers.
