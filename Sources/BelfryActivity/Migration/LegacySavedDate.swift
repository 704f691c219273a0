import Foundation

/// Reads and writes the legacy store's loosely typed `saved_date`.
enum LegacySavedDate {
    /// Parses a stored saved date: ISO 8601 with a time zone (fractional seconds optional), or
    /// Unix seconds written as a number.
    static func parse(_ raw: String?) -> Result<Date, SkipReason> {
        guard let text = raw?.trimmingCharacters(in: .whitespacesAndNewlines), !text.isEmpty else {
            return .failure(.missingSavedDate)
        }
        if let seconds = Double(text) {
            // Negative or non-finite seconds are not a date the old app could have written.
            return seconds.isFinite && seconds >= 0
                ? .success(Date(timeIntervalSince1970: seconds)) : .failure(.unparsableSavedDate)
        }
        if let date = try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true)) {
            return .success(date)
        }
        if let date = try? Date(text, strategy: .iso8601) {
            return .success(date)
        }
        return .failure(.unparsableSavedDate)
    }

    /// The text a legacy save writes: ISO 8601 in UTC with milliseconds.
    static func text(for date: Date) -> String {
        Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(date)
    }
}
