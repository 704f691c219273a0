// The seed's wire types (`PreferenceData`, `PreferenceOptions`, `ChannelLevelPreferenceOptions`,
// …), the workspace definitions and the preference rule live in BelfryCore, shared with the
// server: `import BelfryClient` brings them along, so an app needs one import.
@_exported import BelfryCore
