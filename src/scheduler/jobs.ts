/**
 * Housekeeping with croner: expire 24 h-old queued messages, write API keys' last use (kept in
 * memory per request) once a minute, forget 24 h-old idempotency records, delete expired media
 * and webhook deliveries finished more than 30 days ago, let campaigns paused for the monthly
 * allowance go on when a new month gives them room, and start or complete a campaign whose step
 * could not be written when it was due (`CampaignService.sweep`).
 */
import { Cron } from 'croner'
import type { Services } from '../services'

export function startJobs(svc: Services): Cron[] {
  const guard = (name: string, fn: () => void) => () => {
    try {
      fn()
    } catch (e) {
      svc.log.error('job failed', { job: name, error: String((e as Error)?.stack ?? e) })
    }
  }
  return [
    new Cron('30 * * * * *', { protect: true }, guard('expire-queued', () => svc.messages.expireQueued())),
    new Cron('45 * * * * *', { protect: true }, guard('key-last-used', () => svc.keys.flushUse())),
    new Cron('0 */10 * * * *', { protect: true }, guard('purge-idempotency', () => void svc.idempotency.purge())),
    new Cron('0 35 * * * *', { protect: true }, guard('webhook-delivery-retention', () => void svc.webhooks.pruneFinished())),
    new Cron('5 0 * * * *', { protect: true }, guard('campaigns-allowance', () => svc.campaigns.resumeWhereRoom())),
    new Cron('15 * * * * *', { protect: true }, guard('campaigns-sweep', () => svc.campaigns.sweep())),
    new Cron('0 5 * * * *', { protect: true }, guard('media-retention', () => void svc.media.purgeExpired().catch((e) => svc.log.error('media retention failed', { error: String(e) })))),
  ]
}
