"""Byte layouts shared by the store and the wire codec (standard library only; the record
package's batch encoders also use numpy -- see the import-linter contracts).

One module per format, each opening with its layout table: ``record`` (commit-log
records: a package, the layout in ``record.layout``), ``properties`` (the property
string), ``batch`` (client batch bodies), ``hashing`` (Java ``String.hashCode`` for tags
and keys), ``msgid`` (offset message ids).
"""
