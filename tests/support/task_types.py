"""The argument and result types the task tests use: msgspec models, dataclasses, a named
tuple and an enum. The integration tests' task module carries this file's text (`SOURCE`),
so the types there and here are written once."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import inspect
import sys
import uuid
from typing import NamedTuple

import msgspec


class Tier(enum.Enum):
    FREE = "free"
    PRO = "pro"


@dataclasses.dataclass
class Address:
    city: str
    zip: str = ""


class Order(msgspec.Struct):
    id: uuid.UUID
    total: decimal.Decimal
    placed: datetime.datetime


class Parcel(NamedTuple):
    weight_g: int
    fragile: bool = False


class Item(msgspec.Struct):
    sku: str
    quantity: int


@dataclasses.dataclass
class Receipt:
    order: Order
    address: Address
    tier: Tier
    ran_ms: int


SOURCE = inspect.getsource(sys.modules[__name__])
"""This module's text, for a task module of its own to start with."""
