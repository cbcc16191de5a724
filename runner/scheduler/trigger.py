"""A suite's crontab line in its time zone: fire times, DST gaps and folds included.

APScheduler 3.11's CronTrigger supplies the crontab parsing and field arithmetic, run in UTC
against the suite's wall clock; it stays behind this module.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from runner.config import LoadedConfig
from runner.errors import ConfigError

MAX_COALESCE = 1_000  # fire times counted one by one; past it the latest is found directly
SHIFT_WINDOW = timedelta(hours=26)  # longer than any offset change (Samoa skipped a day)
LOOKBACK = timedelta(days=400)  # how far back a fire is looked for, or a handled one believed


_DOW_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun")


def _crontab_dow(expr: str) -> str:
    """Crontab's numeric weekdays (0 or 7 = Sunday) as names.

    APScheduler 3 reads a number as Monday-based (its documented historical mistake, fixed
    only in 4.x); names mean the same to both, so numbers are spelled out before parsing.
    """
    out: list[str] = []
    for part in expr.split(","):
        if not part or not set(part) <= set("0123456789-/*"):
            out.append(part)  # names (mon-fri) and anything APScheduler should reject
            continue
        span, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if span == "*":
            lo, hi = 0, 6
        elif "-" in span:
            lo_text, _, hi_text = span.partition("-")
            lo, hi = int(lo_text), int(hi_text)
        else:
            lo = int(span)
            hi = 6 if step_text else lo  # "1/2" means from Monday on, every other day
        if not (0 <= lo <= 7 and 0 <= hi <= 7 and lo <= hi and step >= 1):
            raise ValueError(f"day-of-week {part!r} is out of range 0-7")
        if part == "*":
            out.append("*")
            continue
        out.extend(_DOW_NAMES[day] for day in range(lo, hi + 1, step))
    return ",".join(dict.fromkeys(out))


class Trigger:
    """A suite's crontab line in its time zone, via APScheduler's CronTrigger.

    Five fields as crontab has them; six when the first is a second field (`*/10 * * * * *`
    fires every ten seconds), for sub-minute schedules such as a soak test's.
    """

    def __init__(self, expr: str, timezone: str, *, config_path: Path, suite: str) -> None:
        from apscheduler.triggers.cron import CronTrigger

        try:
            tz = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(
                config_path, f"suites.{suite}.timezone", f"unknown time zone {timezone!r}"
            ) from None
        fields = expr.split()
        if len(fields) not in (5, 6):
            raise ConfigError(
                config_path,
                f"suites.{suite}.schedule",
                f"bad cron {expr!r}: expected 5 fields (minute hour day month weekday), "
                f"or 6 with a leading second field, got {len(fields)}",
            )
        second = fields.pop(0) if len(fields) == 6 else "0"  # 6 fields: seconds first
        minute, hour, day, month, dow = fields
        try:
            self._cron = CronTrigger(
                second=second,
                minute=minute,
                hour=hour,
                day=day,
                month=month,
                day_of_week=_crontab_dow(dow),
                timezone=UTC,  # matched against the wall clock: see `_next`
            )
        except ValueError as exc:
            raise ConfigError(
                config_path, f"suites.{suite}.schedule", f"bad cron {expr!r}: {exc}"
            ) from None
        if self._cron.get_next_fire_time(None, datetime.now(UTC)) is None:  # `0 0 30 2 *`
            raise ConfigError(
                config_path, f"suites.{suite}.schedule", f"cron {expr!r} names no date that exists"
            )
        self.expr = expr
        self.timezone = timezone
        self.tz = tz

    @classmethod
    def for_suite(cls, loaded: LoadedConfig, name: str) -> Trigger | None:
        """The suite's `schedule` in its `timezone`, as `serve` fires it; None without one."""
        suite = loaded.config.suites[name]
        if not suite.schedule:
            return None
        return cls(suite.schedule, suite.timezone, config_path=loaded.path, suite=name)

    def first(self, now: datetime) -> datetime | None:
        """The first fire time at or after `now`."""
        return self._next(now, strictly=False)

    def after(self, previous: datetime) -> datetime | None:
        """The first fire time after `previous` (which may still be in the past)."""
        return self._next(previous, strictly=True)

    def _next(self, bound: datetime, *, strictly: bool) -> datetime | None:
        """The first fire time at (unless `strictly`) or after `bound`, in UTC.

        The crontab fields are matched against the zone's wall clock by a trigger that runs
        in UTC, where no day is 23 hours long: APScheduler 3's own arithmetic in a zone with
        DST adds 24 hours to step a day, and skipped the night after each spring-forward for a
        `0 0 * * *` job. A wall-clock time is read with the offset in force just before it
        (`fold=0`): one in a spring-forward gap fires later by the gap's length (02:30 at 03:30),
        and one in a fall-back's repeated hour at its first occurrence only, so a nightly job
        runs once that night.

        Wall-clock order is fire order for the times that exist, so the first of them that
        fires at or after `bound` is the answer, unless a gap's time (which fires after the
        gap) comes first; times that fire too early are passed a stretch of one offset at a
        time, so a per-second schedule costs a few dozen steps near a DST change, not one per
        second.
        """
        bound = bound.astimezone(UTC)
        own = self._wall(bound)
        behind = self._offset(bound) - self._offset(bound - SHIFT_WINDOW)
        fire = self._cron.get_next_fire_time(None, own - max(behind, timedelta(0)))
        best: datetime | None = None
        while fire is not None:
            if best is not None and fire - SHIFT_WINDOW > best:
                return best  # no offset brings this or a later time back before `best`
            offset = self._offset_at(fire)
            real = (fire - offset).replace(tzinfo=UTC)
            if real < bound or (real == bound and strictly):
                # fires too early: on to the first time at this offset that does not, or to
                # the end of this offset's stretch if that comes first (read with the next
                # offset, the stretch's end itself may count)
                at, end = bound + offset, self._stretch_end(fire)
                if end <= at:
                    fire = self._cron.get_next_fire_time(None, end)
                else:
                    fire = self._cron.get_next_fire_time(at if strictly else None, at)
                continue
            best = real if best is None else min(best, real)
            if self._exists(fire):
                return best
            # a gap's first time that counts: the gap's later times fire later still
            fire = self._cron.get_next_fire_time(None, max(self._stretch_end(fire), own))
        return best

    def _wall(self, when: datetime) -> datetime:
        """`when` on this zone's wall clock, labelled UTC for the wall-clock trigger."""
        return when.astimezone(self.tz).replace(tzinfo=UTC)

    def _offset_at(self, wall: datetime) -> timedelta:
        """The offset a wall-clock time is read with: the one in force just before it."""
        return wall.replace(tzinfo=self.tz).utcoffset() or timedelta(0)

    def _exists(self, wall: datetime) -> bool:
        """Whether a wall-clock time happens in this zone (not inside a spring-forward gap)."""
        return self._wall((wall - self._offset_at(wall)).replace(tzinfo=UTC)) == wall

    def _stretch_end(self, wall: datetime) -> datetime:
        """The first wall-clock time after `wall` read with another offset (to the second:
        offsets change on whole seconds), or SHIFT_WINDOW on when none is that near."""
        offset = self._offset_at(wall)
        low, high = wall.replace(microsecond=0), wall.replace(microsecond=0) + SHIFT_WINDOW
        if self._offset_at(high) == offset:
            return high
        while high - low > timedelta(seconds=1):
            middle = low + (high - low) // 2
            middle -= timedelta(microseconds=middle.microsecond)
            if self._offset_at(middle) == offset:
                low = middle
            else:
                high = middle
        return high

    def _offset(self, when: datetime) -> timedelta:
        return when.astimezone(self.tz).utcoffset() or timedelta(0)

    def due(self, fire: datetime, now: datetime) -> tuple[list[datetime], datetime | None]:
        """Fire times from `fire` up to `now`, and the first one after `now`.

        The list always ends with the latest fire time at or before `now`; past MAX_COALESCE
        (a per-second schedule after a day down) the ones between are not listed.
        """
        passed: list[datetime] = []
        current: datetime | None = fire
        while current is not None and current <= now:
            passed.append(current)
            if len(passed) >= MAX_COALESCE:
                latest = self.latest(now)
                if latest is not None and latest > current:
                    passed.append(latest)
                return passed, self.after(now)
            current = self.after(current)
        return passed, current

    def latest(self, now: datetime) -> datetime | None:
        """The last fire time at or before `now` (None if there is none within LOOKBACK).

        APScheduler only counts forward. `first(t)` never decreases as `t` grows, so this
        looks back twice as far each time until a window holds a fire, then halves that
        window down to the last `t` whose first fire is not past `now`: some fifty lookups for
        any schedule, where counting fires one by one could take a day's seconds.
        """
        back = timedelta(seconds=1)
        while True:
            low = now - back
            fire = self.first(low)
            if fire is not None and fire <= now:
                break
            if back >= LOOKBACK:
                return None
            back = min(back * 2, LOOKBACK)
        high = now + timedelta(microseconds=1)  # first(high) is past now; first(low) is not
        while high - low > timedelta(milliseconds=100):  # fire times are whole seconds apart
            middle = low + (high - low) / 2
            found = self.first(middle)
            if found is not None and found <= now:
                low = middle
            else:
                high = middle
        return self.first(low)
