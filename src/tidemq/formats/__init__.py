"""Byte layouts shared by the store and the wire codec (standard library only).

One module per format, each opening with its layout table: ``record`` (commit-log
records), ``properties`` (the property string), ``batch`` (client batch bodies),
``hashing`` (Java ``String.hashCode`` for tags and keys), ``msgid`` (offset message ids).
"""
