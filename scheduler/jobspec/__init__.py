"""Jobspecs (RFC 14/25): `document` reads the text as libjobspec does, `jobspec` is the
model and its checks, `request` the tree the traverser walks, `builder` makes jobspecs
for pods and slot kinds.
"""
