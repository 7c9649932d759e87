/**
 * Housekeeping with croner: expire 24 h-old queued messages, write API keys' last use (kept in
 * memory per request) once a minute, forget 24 h-old idempotency records (and, once an hour,
 * instances sharing the database not seen for an hour), delete expired media
 * and webhook deliveries finished more than 30 days ago, remove message content past its
 * workspace's retention, let campaigns paused for the monthly allowance go on when a new month
 * gives them room, start or complete a campaign whose step could not be written when it was due
 * (`CampaignService.sweep`), warn every ten minutes while the data directory's disk is
 * nearly full or (PostgreSQL) this machine's clock is off the database's (clock-check.ts), and
 * write an automatic backup when one is due (modules/backups).
 */
import { Cron } from 'croner'
import { diskSpace } from '../disk'
import type { Services } from '../services'

/** A warning line while the data directory's disk is low (see disk.ts); nothing otherwise. */
export function warnIfDiskLow(svc: Services) {
  const disk = diskSpace(svc.deps.config.dataDir)
  if (disk?.state === 'low') svc.log.warn("the data directory's disk is nearly full: writes will be refused (507) when it is", { free_bytes: disk.free_bytes, total_bytes: disk.total_bytes })
}

export function startJobs(svc: Services): Cron[] {
  // a job that fails is logged; one that works in steps (returns a promise) is awaited, so that
  // croner's `protect` keeps a run that is still going from overlapping the next
  // a job marked `once` runs on one instance per schedule when several share the database
  const guard = (name: string, fn: () => unknown, once = false) => async () => {
    try {
      if (once && !(await svc.pacer.leases.runsJob(name, 50_000))) return
      await fn()
    } catch (e) {
      svc.log.error('job failed', { job: name, error: String((e as Error)?.stack ?? e) })
    }
  }
  return [
    new Cron('30 * * * * *', { protect: true }, guard('expire-queued', () => svc.messages.expireQueued(), true)),
    new Cron('45 * * * * *', { protect: true }, guard('key-last-used', () => svc.keys.flushUse())),
    new Cron('0 */10 * * * *', { protect: true }, guard('purge-idempotency', () => svc.idempotency.purge(), true)),
    new Cron('10 15 * * * *', { protect: true }, guard('gone-instances', () => svc.pacer.leases.forgetGone(), true)),
    new Cron('0 35 * * * *', { protect: true }, guard('webhook-delivery-retention', () => svc.webhooks.pruneFinished(), true)),
    new Cron('5 0 * * * *', { protect: true }, guard('campaigns-allowance', () => svc.campaigns.resumeWhereRoom(), true)),
    new Cron('15 * * * * *', { protect: true }, guard('campaigns-sweep', () => svc.campaigns.sweep(), true)),
    new Cron('20 */10 * * * *', { protect: true }, guard('disk-space', () => warnIfDiskLow(svc))),
    // each instance its own clock (PostgreSQL; nothing on SQLite)
    new Cron('40 */10 * * * *', { protect: true }, guard('clock-check', () => svc.clockCheck.run())),
    new Cron('0 25 * * * *', { protect: true }, guard('message-retention', () => svc.messageRetention.run(), true)),
    new Cron('0 5 * * * *', { protect: true }, guard('media-retention', () => svc.media.purgeExpired(), true)),
    new Cron('50 */10 * * * *', { protect: true }, guard('automatic-backup', () => svc.backups.runIfDue())),
    // and a minute after the start: a new installation has its first backup at once
    new Cron(new Date(Date.now() + 60_000), { maxRuns: 1 }, guard('automatic-backup', () => svc.backups.runIfDue())),
  ]
}
